"""``rt chaos``: a whole stream on this machine under load and a seeded schedule of
faults, judged at the end by one checker (lost, duplicated, reordered, divergent,
stuck, dedup violations).

The data path of a run: :mod:`.schedule` draws the faults from the seed,
:mod:`.world` builds the stream with its hosts (network namespaces, loop-mounted
disks, movable clocks), :mod:`.apps` are the publishing and subscribing
applications, :mod:`.nemesis` injects each fault, :mod:`.monitor` samples
progress, :mod:`.history` reads what applications were told and what they got,
:mod:`.checker` judges it and :mod:`.report` writes the report and the timeline.
:mod:`.runner` ties them together.
"""
