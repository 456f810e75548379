"""The ``rt`` command: thin wiring over the library; nothing imports it."""
