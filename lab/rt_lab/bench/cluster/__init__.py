"""``rt bench cluster``: the whole stream end to end, with the raft sequencer.

Each measurement starts a fresh stream on this machine (:class:`LocalStream`, real
daemons, real mutual TLS): three RT nodes on 127.0.0.1-3, each one ``rt node``
process (push server, sequencer and pull server); two publisher hosts (pub-1
topic ``trades``, pub-2 topic ``quotes``) and one subscriber host (sub-1) whose
applications replicate and pull in process (``--clients daemons``: an ``rt
push-client`` per publisher host, an ``rt pull-client`` keeping sub-1's copy).
The publishing and subscribing applications run as their own processes
(:mod:`~rt_lab.bench.cluster.children`), as they would on their own hosts;
the subscriber reads the copy with :class:`~rt_appliance.subscribe.Subscriber`,
following it (inotify).

Measurements, all with 100-byte payloads, one module each:

* :mod:`~rt_lab.bench.cluster.throughput`: both publishers write ``messages``
  each with ``publish_batch`` (batches of 1,000) as fast as they can; the figure is
  the messages over the time from the first publish to the moment the subscriber has
  read all of them;
* :mod:`~rt_lab.bench.cluster.merge`: the sequencers alone, merging input that
  is already on every node before the nodes start;
* :mod:`~rt_lab.bench.cluster.failover`: SIGKILL the leader's node under
  a paced load; a run's figure is the median of its kills;
* :mod:`~rt_lab.bench.cluster.latency`: publish-to-subscriber latency of single
  publish calls, and the same timed at each stage of the stream (``stages``);
* :mod:`~rt_lab.bench.cluster.memory`: RSS of each ``rt node`` process while
  ``memory_messages`` messages pass through the stream.

:mod:`~rt_lab.bench.cluster.harness` holds what they share (the options, the
stream and its applications); :mod:`~rt_lab.bench.cluster.suite` runs them and
gathers the report. Status comes from the nodes' control channels (what ``rt status
--json`` prints), asked over connections kept open for the whole measurement
(:class:`~rt_appliance.nodestatus.StatusPoller`).
"""
