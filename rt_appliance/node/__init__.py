"""The RT node as one process (``rt node``): push server, sequencer and pull server."""
