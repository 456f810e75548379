"""``python -m rt_appliance.cli``: the same as the ``rt`` command."""

from rt_appliance.cli.main import main

main()
