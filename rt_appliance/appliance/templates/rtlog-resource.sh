#!/bin/sh
# Written by `rt apply`: the resource discovery script of rt-spark-worker.service.
# The Spark worker of an RT node offers one "rtlog" resource; executors that ask for it
# run only where the merged log is (spark.executor.resource.rtlog.amount=1).
echo '{"name": "rtlog", "addresses": ["0"]}'
