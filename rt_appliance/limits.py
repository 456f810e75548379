"""Every size and count limit of rt-appliance, in one place.

The relations between them are checked when this module is imported, so a bad
edit fails at once rather than in production.
"""

from __future__ import annotations

from rt_appliance.invariants import invariant

# Position layout (KX's): session << 44 | roll << 30 | offset.
OFFSET_BITS = 30
ROLL_BITS = 14
SESSION_BITS = 20

MAX_OFFSET = (1 << OFFSET_BITS) - 1
MAX_ROLL = (1 << ROLL_BITS) - 1
MAX_SESSION = (1 << SESSION_BITS) - 1

# A file's end offset must itself be a position, so a file stays below 2**30 bytes.
MAX_FILE_BYTES = MAX_OFFSET
DEFAULT_ROLL_BYTES = 1 << 30
MAX_ROLL_BYTES = 1 << 30
MIN_ROLL_BYTES = 1024

# Records.
MAX_PAYLOAD_BYTES = 64 << 20
MAX_TOPIC_BYTES = 100
MAX_HOST_BYTES = 253

# Reading: bytes read from a file at a time, and messages per batch.
READ_CHUNK_BYTES = 4 << 20
MAX_BATCH_MESSAGES = 65536
DEFAULT_BATCH_MESSAGES = 4096

# Publisher durability.
DEFAULT_FSYNC_INTERVAL_MS = 1000
MAX_FSYNC_INTERVAL_MS = 60_000
DEFAULT_FSYNC_BATCH_MESSAGES = 1000

# How often a blocked publisher re-checks its disk budget, and a follower its files
# when no inotify event arrives.
BUDGET_POLL_MIN_S = 0.005
BUDGET_POLL_MAX_S = 0.25
FOLLOW_POLL_S = 1.0

# Replication: TCP keepalive finds a peer that vanished without a FIN (power loss,
# partition) on an idle stream within about idle + interval * probes seconds.
KEEPALIVE_IDLE_S = 10
KEEPALIVE_INTERVAL_S = 5
KEEPALIVE_PROBES = 3

# Memory a daemon needs (checked against each role's MemoryMax by rt.yaml validation):
# a Python daemon with its libraries, plus per replication connection a few frames
# (measured moving 64 MiB records in 4 MiB frames: 3-11 frames of growth per daemon,
# see docs/BENCHMARKS.md; the base covers the rest), plus for the sequencer a few
# copies of the largest record (it builds a merged record from the input bytes and
# checks it against the commit).
DAEMON_BASE_BYTES = 128 << 20
FRAMES_PER_CONNECTION = 8
RECORD_COPIES = 4

invariant(OFFSET_BITS + ROLL_BITS + SESSION_BITS == 64, "position fields fill 64 bits")
invariant(MAX_ROLL_BYTES <= MAX_FILE_BYTES + 1, "a rolled file's end offset fits in a position")
invariant(MIN_ROLL_BYTES <= DEFAULT_ROLL_BYTES <= MAX_ROLL_BYTES, "default roll size in range")
invariant(MAX_PAYLOAD_BYTES < MAX_FILE_BYTES // 2, "a maximal record fits in a maximal file")
invariant(READ_CHUNK_BYTES >= 1 << 16, "read chunks are not tiny")
invariant(0 < DEFAULT_BATCH_MESSAGES <= MAX_BATCH_MESSAGES, "default batch within its bound")
invariant(0 < DEFAULT_FSYNC_INTERVAL_MS <= MAX_FSYNC_INTERVAL_MS, "fsync interval in range")
invariant(BUDGET_POLL_MIN_S < BUDGET_POLL_MAX_S, "budget poll backoff grows")
