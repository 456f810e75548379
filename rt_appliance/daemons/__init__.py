"""Long-running processes: wiring, signals; nothing imports these but the CLI."""
