"""The lab's ``rt`` commands (``demo``, ``bench``, ``chaos``), registered as ``rt.commands``
entry points; ``rt_appliance.cli.main`` adds them when the lab is installed."""
