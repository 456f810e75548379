"""rt-lab: the workbench around rt-appliance, kept out of the product.

What is here measures, shakes and shows the product; none of it runs on an RT node:

* ``rt_lab.demo``: ``rt demo``, a whole stream on one machine;
* ``rt_lab.bench``: ``rt bench ...``, throughput, latency, failover and the peers side by side;
* ``rt_lab.chaos``: ``rt chaos``, a stream under faults and the checker's verdict;
* ``rt_lab.testing``: the clusters, faults and checkers the tests and the demo share;
* ``rt_lab.cli``: those commands, which ``rt`` finds through the ``rt.commands`` entry point.

Imports run one way: the lab imports ``rt_appliance``, never the reverse.
"""
