"""The appliance: ``rt apply`` renders a host's systemd units from ``rt.yaml`` and installs them.

``roles`` says which daemons a host runs, ``render`` turns the configuration into
unit files (pure), ``hostcheck`` refuses a host whose certificates or service user
would stop the daemons, and ``apply`` compares, writes and reloads systemd.
"""
