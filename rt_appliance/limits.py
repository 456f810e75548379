"""Every size and count limit of rt-appliance, in one place.

Sizes, counts, queue lengths, buffer and chunk sizes, frame sizes, and the timeouts,
intervals and backoff ceilings that bound waiting, grouped by the stage they belong to;
limits that go together (a first step and its ceiling, a retry and how often it is
logged) share a line. The relations between them are checked when this module is
imported (at the bottom), so a bad edit fails at once rather than in production;
relations to the byte layout of the log (header and record sizes) are checked in
:mod:`rt_appliance.log.format`, where that layout is defined. The settings of
``rt.yaml`` keep their defaults and ranges in :mod:`rt_appliance.config`. The figures
some of these values were chosen from are in docs/BENCHMARKS.md ("Figures behind the
limits and defaults").
"""

from __future__ import annotations

from rt_appliance.invariants import invariant

# -- Positions -------------------------------------------------------------------------

# Position layout (KX's): session << 44 | roll << 30 | offset.
OFFSET_BITS = 30
ROLL_BITS = 14
SESSION_BITS = 20

MAX_OFFSET = (1 << OFFSET_BITS) - 1
MAX_ROLL = (1 << ROLL_BITS) - 1
MAX_SESSION = (1 << SESSION_BITS) - 1

# -- Log: files and records ------------------------------------------------------------

# A file's end offset must itself be a position, so a file stays below 2**30 bytes.
MAX_FILE_BYTES = MAX_OFFSET
# Roll size: the default, and the range a writer accepts.
DEFAULT_ROLL_BYTES = 1 << 30
MIN_ROLL_BYTES, MAX_ROLL_BYTES = 1024, 1 << 30

# Records: the largest payload, and the longest topic and host names.
MAX_PAYLOAD_BYTES = 64 << 20
MAX_TOPIC_BYTES, MAX_HOST_BYTES = 100, 253

# -- Log: reading ----------------------------------------------------------------------

# Bytes read from a file at a time.
READ_CHUNK_BYTES = 4 << 20
# Messages per batch a reader hands out: at most, and by default.
MAX_BATCH_MESSAGES, DEFAULT_BATCH_MESSAGES = 65536, 4096
# A read at a file's end asks for this much first (a read allocates what it asks for),
# doubling up to READ_CHUNK_BYTES through a backlog: a follower mostly reads a few records.
FOLLOW_CHUNK_BYTES = 64 << 10
# Bytes read to decode a file header (its fixed part, the longest topic and host and its
# CRC come to 389), and a range record's payload in the merged log (371 at the most):
# one read always holds the whole of either.
MAX_FILE_HEADER_BYTES, RANGE_READ_BYTES = 1024, 1024
# A resume offset is proven a record boundary by one read of a record up to this size;
# at a larger record the check walks the file's records instead.
RECORD_PROBE_BYTES = 1 << 16
# A scan limit no buffer reaches (a record takes at least its header's bytes): scan
# every whole record of the buffer.
UNBOUNDED_SCAN_RECORDS = 1 << 30
# Below this many records a plain loop checks headers faster than numpy, whose fixed
# cost per call dominates a follower's usual read of a few records.
NUMPY_MIN_RECORDS = 64
# A directory's mtime moves in coarse clock ticks (an entry made in the same tick as a
# listing leaves it unchanged), so a cached listing is trusted only for an mtime older
# than the listing by more than a tick: by the first for a follower's cursor, and for a
# shared listing cache (read far more often) once the mtime is as old as the second.
MTIME_SLACK_NS, LISTING_SETTLE_NS = 1_000_000_000, 100_000_000
# Bytes of a directory's lock file read to name the writer holding it (its pid).
LOCK_HOLDER_BYTES = 32
# How often a follower that started before its publisher looks for the directory.
DIRECTORY_POLL_S = 0.05

# -- Log: recovery ---------------------------------------------------------------------

# Bytes read from a damaged file's start to tell a torn header (a file this short, or
# only zeros) from damage: a header being made is far smaller.
TORN_HEADER_PROBE_BYTES = 1 << 16
# Cut bytes walked to count the records a truncation lost; beyond, the count is a lower
# bound (the bytes are about to be cut, reading all of a large tail is not worth it).
MAX_COUNTED_BYTES = 64 << 20

# -- Publish ---------------------------------------------------------------------------

# Publisher durability: the sync interval (default and most), and the messages per sync
# of a batch publisher by default.
DEFAULT_FSYNC_INTERVAL_MS, MAX_FSYNC_INTERVAL_MS = 1000, 60_000
DEFAULT_FSYNC_BATCH_MESSAGES = 1000
# How often a blocked publisher re-checks its disk budget: from the first, doubling up
# to the second.
BUDGET_POLL_MIN_S, BUDGET_POLL_MAX_S = 0.005, 0.25
# How often a follower re-checks its files when no inotify event arrives.
FOLLOW_POLL_S = 1.0
# A disk budget holds at least this many roll files: the one being written and one
# rolled file, so dropping the oldest always frees room.
BUDGET_MIN_ROLLS = 2
# Bytes `rt publish` reads from stdin at a time; the lines of one read go as one batch.
STDIN_READ_BYTES = 1 << 20

# -- Replication and transport ---------------------------------------------------------

# TCP keepalive finds a peer that vanished without a FIN (power loss, partition) on an
# idle stream within about idle + interval * probes seconds.
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES = 10, 5, 3
# A listening socket's queue of connections not yet accepted, and how long a server
# waits before accepting again after accept() failed (out of descriptors, say).
LISTEN_BACKLOG, ACCEPT_RETRY_S = 128, 0.1
# Room kept in every frame for what precedes the file bytes (a DATA header and directory
# name, a FETCHED head): a sender puts at most max_frame_bytes - this of a file in one frame.
FRAME_MARGIN_BYTES = 16 << 10
# Large frames are read into one buffer and written this much at a time, waiting for the
# transport to drain in between, so TLS never holds an encrypted copy of a whole frame.
SLICE_BYTES = 256 << 10
# Connecting (TCP and TLS) to a node, and each side's HELLO/WELCOME: a node that does
# not answer within these is tried again later (or the next node is).
CONNECT_TIMEOUT_S, HANDSHAKE_TIMEOUT_S = 10.0, 10.0
# Best effort on a connection that ends: sending the ERROR that says why, then waiting
# for the close; a peer that does not read is not waited for longer.
ERROR_SEND_WAIT_S, CLOSE_WAIT_S = 1.0, 1.0
# A push client with nothing to send waits at most this long for a write before it looks
# again (the ack timeout and the lag metric are checked between waits).
PUSH_IDLE_WAIT_S = 0.5
# Frames a push connection has on their way unacknowledged. A lone message leaves at
# once; while the window is full what the publisher writes piles up and leaves in one
# frame when an acknowledgement opens it, so under load a frame carries several of the
# publisher's writes and every node does less work per message.
PUSH_WINDOW_FRAMES = 2
# A node whose copy no merge waits for (a follower while the leader carries the input)
# says "later" in its acknowledgements; a publisher's sender then holds a new write for
# it this long after an idle wait, and sends it with what follows: the follower takes it
# after raft's round for the same bytes, in fewer frames.
PUSH_LATER_S = 0.02
# How often a replicator updates its lag metric (a directory walk).
LAG_UPDATE_S = 1.0
# A push client finding a directory sent by another process (an application's own
# Publisher) tries to take it over this often: it sends the rest once that one stops.
SENDER_LOCK_RETRY_S = 2.0
# An application's Publisher that replicates waits at most this long in close() for
# every node to acknowledge what it published (the rest stays on its disk
# for the next start or an ``rt push-client``).
PUBLISHER_CLOSE_LINGER_S = 5.0
# A chunk the pull server read smaller than this came from the merged log's tail, in the
# page cache: the next read is done on the event loop (no thread hand-off per message);
# after a larger one (catching up, maybe from disk) reads go to a worker thread.
INLINE_READ_BYTES = 64 << 10
# The leader's planner likewise: a step whose proposals cover less input than this (a
# stream keeping up) runs on the event loop; from this much on (a backlog), in a worker
# thread. A chunk the application's own pull client receives smaller than
# INLINE_READ_BYTES is written to its copy on its loop.
INLINE_PLAN_BYTES = 64 << 10
# A node's in/ directory is listed again at most this often when its push server (in the
# same process) names the inputs it writes: a new input comes through it at once, and the
# listing only finds what came another way. It was a stat of the directory per planner step.
INPUT_LISTING_EVERY_S = 1.0
# A pull connection looks for a new oldest file (to send PRUNE) at most this often, and
# after each wake by the merger (a prune or a new file comes with one): not a stat per send.
PRUNE_CHECK_EVERY_S = 0.5
# The newest committed merged records a node keeps in memory for its pull connections
# (replicate/fresh.py): sent from there as soon as they are applied, before the merger's
# thread writes them. A connection further behind than this reads the file.
FRESH_KEEP_RECORDS, FRESH_KEEP_BYTES = 256, 4 << 20
# Input bytes the leader's proposals may carry in their raft entries at once (ranges no
# majority reported holding yet; sequencer.planner). A stream keeping up carries each
# message in its entry and waits for no report; under a backlog the reports run ahead of
# the plan and the ranges carry nothing, so raft does not carry the bulk of the input too.
CARRY_MAX_BYTES = 64 << 10
# How often an idle pull connection checks that its node's sequencer is alive, and how
# long a refused client is given to read the ERROR that says why before the close.
STALE_CHECK_S, REFUSAL_DRAIN_S = 1.0, 1.0
# A server that stops cancels the connections it serves and waits this long for them.
SHUTDOWN_GRACE_S = 2.0
# Identical refusals in a row (nothing acknowledged between) that make a connection
# stuck: one or two may be a passing failure, more are a peer that will not take them.
STUCK_AFTER = 5
# A node that failed is tried after the others for this long, so that a node sending
# clients away (its sequencer silent) is not the next choice again at once.
AVOID_AFTER_FAILURE_S = 10.0
# `rt replication status` waits this long for each daemon's metrics; a daemon that does
# not answer is shown unreachable.
METRICS_SCRAPE_TIMEOUT_S = 2.0
# Bytes of a peer's file asked per node-to-node FETCH (copying a stretch of the merged
# log, repairing a damaged file).
FETCH_BYTES = 4 << 20
# The wait for each FETCH answer, and for the fetcher's own loop when it is stuck or
# closing.
FETCH_TIMEOUT_S, FETCHER_CLOSE_WAIT_S = 5.0, 5.0
# A peer whose FETCH failed (no answer: paused, cut off) is asked last for this long.
FETCH_PEER_PENALTY_S = 30.0
# The wait for each FETCH of a leader planning from a peer's copy of an input: planning
# waits for it, so a paused peer is given up on sooner, and the next peer asked; a peer
# that failed so is not asked again for the second figure.
PLAN_FETCH_TIMEOUT_S, PLAN_FETCH_PENALTY_S = 1.0, 5.0

# -- Sequencer -------------------------------------------------------------------------

# A heartbeat file (heartbeat.py) older than this says the node's sequencer is silent:
# its merged log is not growing, and its pull server sends subscribers elsewhere.
SEQUENCER_STALE_S = 3.0
# The control channel: a failed report is retried after REPORT_RETRY_FIRST_S, doubling
# up to the report interval; a leader that does not answer within REPORT_ANSWER_S is
# dialled again; while waiting, the raft leader is looked at every LEADER_CHECK_S, so a
# new leader is followed at once. `rt status` waits STATUS_ANSWER_S for each node.
REPORT_RETRY_FIRST_S, REPORT_ANSWER_S, LEADER_CHECK_S = 0.05, 5.0, 0.05
# A node whose writes fail (a full disk, EIO) is unfit to lead until UNFIT_HOLD_S pass
# with no failure (sequencer/fitness.py); an unfit leader hands its leadership over, or
# gives it up without a hand-over after STEP_DOWN_FORCE_S with no follower caught up.
UNFIT_HOLD_S, STEP_DOWN_FORCE_S = 2.0, 0.5
# ... asking again every STEP_DOWN_RETRY_S meanwhile (raft's ticks: a follower that was
# a few entries behind catches up within a heartbeat or two once nothing is proposed)
STEP_DOWN_RETRY_S = 0.05
# A leader whose own copy of an input lacks bytes a majority holds, and has lacked them
# this long (or ``sequencer.fetch_after_ms``, if longer), is unfit to lead: its push
# server is down or cut off, and the followers could merge what it cannot.
LEADER_INPUT_BEHIND_S = 1.0
# ... counted while its copy does not grow. One that grows but has trailed a majority's
# this long is unfit too (a slow link or disk); a busy leader at full speed trails by a
# second or two, and keeps reaching what a majority held a moment before.
LEADER_INPUT_LAGGING_S = 10.0
# A leader asked to stop (SIGTERM: systemctl stop, a package upgrade's restart) first
# hands leadership to a caught-up follower, for at most this long, so that the stream
# waits for no election timeout; then it stops whether or not one took over.
HAND_OVER_ON_STOP_S = 1.5
HAND_OVER_POLL_S = 0.05
# Reports are pipelined: at most REPORT_WINDOW sent and not known to be read by the
# leader on a connection. A report asks for an answer at most every REPORT_ASK_S (and
# when half the window is unanswered): the answers show the leader reads the connection
# and open the window; one per report cost a write and a wake on both sides for every
# message.
REPORT_WINDOW, REPORT_ASK_S = 32, 0.25
# While the leader carries the input in its raft entries, a follower's report is not what
# a merge waits for: its change is reported REPORT_DEFER_S later (with any change meanwhile),
# after raft's round for the same bytes rather than in the middle of it, on both nodes.
REPORT_DEFER_S = 0.01
STATUS_ANSWER_S = 5.0

# The planner's wait when nothing wakes it: only a safety net, every change wakes it.
PLAN_IDLE_S = 1.0
# Bytes of an input file read at a time while finding where its whole records end.
INPUT_SCAN_BYTES = 4 << 20
# The leader's wait for a proposed prune to commit before the archiver looks again.
PRUNE_COMMIT_WAIT_S = 10.0
# how often a node writes its committed leases, reads its jobs' wants, and (the
# leader) grants and renews leases; a failover waits up to this long twice more
LEASE_EVERY_S = 0.5
# A follower reports where its copies of an input's files end, from the file holding the
# input's merged position on, at most this many (a leader plans past a file's end only
# where a majority's copies end too; it plans a few files ahead of what is merged).
FILE_ENDS_REPORTED = 8
# A node's push server keeps where the files it saw a publisher's sender move on from
# ended, at most this many per input (the newest): what its leader crosses a file's end on.
FILE_ENDS_KEPT = 16
# A new leader knows no other node's holds until that node reports: the age and size
# rules wait for every node's report, or this many report intervals after taking the
# lead (a node that stays silent that long is down, and holds of a down node are
# only kept by the disk rule's limit).
HOLDS_REPORT_WAIT_INTERVALS = 10
# The observer: how often it samples raft's state, refreshes the gauges that cost a
# directory walk, and writes the heartbeat file this node's pull server reads. It also
# runs at once when the leader changes or a write fails; an idle node wakes for little
# else (each wake of an idle process costs about 0.3 ms of CPU here).
OBSERVE_EVERY_S, GAUGES_EVERY_S, HEARTBEAT_EVERY_S = 1.0, 1.0, 1.0
# How often the event loop's lateness is sampled, and the window its worst is kept for
# (raft's heartbeats and votes wait as long as the loop is late).
LAG_PROBE_S, LAG_WINDOW_S = 0.5, 2.0
# The merger's pause after an error before it retries, and its wait for work when idle
# (the scrubber runs between waits).
MERGER_RETRY_S, MERGER_IDLE_WAIT_S = 1.0, 1.0
# The scrubber walks a merged file in steps of at most this many bytes (about 10 ms each
# here), one step per gap at most, between the merger's appends: about 2.5 MiB/s, a
# 4 MiB file in under 2 s, at most a tenth of the merger's time when it has a backlog.
SCRUB_STEP_BYTES, SCRUB_STEP_GAP_S = 256 << 10, 0.1
# After a sync of the merged log, its synced end is noted at most this often (the marker
# lets a restart scan only what was written after it, not the whole newest file).
MERGED_MARK_EVERY_S = 1.0
# The merger syncs the merged log at most every MERGED_SYNC_EVERY_S, and a busy one at
# least every SYNC_AFTER_ITEMS items. Nothing waits for these syncs: subscribers are sent
# what is written, and what a crash takes from an unsynced tail is written again, the
# same bytes, from the raft journal (or the snapshot, which carries what is owed) and
# the inputs. A sync per merged range cost each node a sync per message when the stream
# is quiet.
MERGED_SYNC_EVERY_S, SYNC_AFTER_ITEMS = 0.2, 1024
# How often the merger looks for input bytes the push server has yet to write (it waits
# fetch_after_ms for them at the most).
INPUT_POLL_S = 0.002
# How long stopping the sequencer waits for the merger's thread.
MERGER_STOP_WAIT_S = 10.0
# A step of stopping a node (raft, the merger, a server) that takes longer is logged.
SLOW_STOP_STEP_S = 1.0
# A daemon's task still running this long after it was cancelled is cancelled again;
# after CANCEL_GRACE_S it is left behind, named in a warning (daemons/tasks.py).
CANCEL_AGAIN_S, CANCEL_GRACE_S = 0.2, 5.0

# -- Raft ------------------------------------------------------------------------------

# Largest raft frame accepted from a peer: a batch of entries or a piece of a snapshot
# is far smaller; a length beyond this is a broken or hostile peer.
MAX_RAFT_FRAME = 64 << 20
# Messages waiting for a journal sync; beyond, they are dropped (syncs are stuck, and
# raft's retransmission covers what is dropped).
RAFT_HELD_MAX = 10_000
# Syncs of a node's raft journal running at once. Entries written while one runs get a
# sync of their own at once instead of waiting for its end: at 5,000 msg/s on a 2-core
# machine sharing one disk, a leader had its entries synced (and applied them) about
# 1.3-1.4 ms sooner with 2 than with 1 (medians of three runs each); 3 were no better
# than 2 (docs/BENCHMARKS.md).
RAFT_SYNCS_IN_FLIGHT = 2
# A node's own proposals kept decoded until they commit (SequencerMachine.proposing):
# sequencer.max_inflight is at most 1024, so only proposals that never commit fall out.
PROPOSED_KEPT = 1024
# Bytes unsent to one peer; beyond, messages are dropped and raft's retransmission covers.
RAFT_SEND_BUFFER_BYTES = 64 << 20
# Dialling a peer (TCP and TLS), and accepting one's TLS handshake.
RAFT_CONNECT_TIMEOUT_S = 3.0
# A failed dial is retried after the first, doubling up to the second: a peer that
# restarts is reached within a second of being back.
RAFT_DIAL_BACKOFF_FIRST_S, RAFT_DIAL_BACKOFF_MAX_S = 0.05, 1.0
# A follower not in step gets one append at a time; unanswered this long, the next
# append goes anyway.
RAFT_ANSWER_WAIT_S = 0.1
# While the raft port is taken: retry this often, and warn at most this often.
RAFT_LISTEN_RETRY_S, RAFT_LISTEN_WARN_EVERY_S = 1.0, 5.0
# Raft's timers are checked at least this often (pysyncobj's autoTickPeriod), and a
# timer tick comes this long after the deadline it serves.
RAFT_TICK_S, RAFT_TIMER_SLACK_S = 0.1, 0.001
# A follower's timer serves its election deadline, and checks at least this often. Every
# message from the leader ticks a follower (and puts the deadline back), so a shorter
# timer would only wake an idle node between heartbeats for nothing (docs/BENCHMARKS.md,
# "An idle node answers less").
RAFT_FOLLOWER_TICK_S = 1.0
# A follower in step answers a heartbeat that brought it nothing new (the answer would
# repeat its last one) at most once per raft_min_timeout_ms, and at least this many times
# within the leader's fallback timeout: the leader learns nothing from a repeat, and still
# hears from each follower often enough to know that a majority is there.
RAFT_QUIET_ANSWERS_PER_FALLBACK = 4
# A tick applies at most this many committed entries: a restarting node replays its
# journal a batch at a time while it already listens, votes and takes appends.
RAFT_APPLY_BATCH = 256
# A failing raft tick is logged at most this often.
RAFT_TICK_FAILURE_LOG_EVERY_S = 5.0
# Floor of how long a peer may leave its send buffer full (read nothing) before it is
# cut off (three election timeouts otherwise): a pause of a second or two is not a
# stuck peer, however short the election timeouts are set.
RAFT_PEER_TIMEOUT_MIN_S = 2.0
# Floor of how long bytes sent on a raft connection may go unacknowledged by the peer's
# kernel before the connection is dropped and dialled afresh (TCP_USER_TIMEOUT; one
# election timeout otherwise). Without it, a connection that lost packets in a partition
# sits in TCP's doubling retransmission wait for seconds after the partition heals.
RAFT_UNACKED_MIN_S = 1.0
# pysyncobj's SyncObjConf, from here on. Commands waiting to be handled.
RAFT_COMMANDS_QUEUE = 100_000
# Bytes of entries in one append (a larger entry goes in pieces of this size), and in
# one piece of a snapshot sent to a follower.
RAFT_APPEND_BATCH_BYTES, RAFT_SNAPSHOT_BATCH_BYTES = 1 << 16, 1 << 16
# Floors of pysyncobj's connection timeout and of the time a leader without a quorum
# keeps leading (two election timeouts otherwise).
RAFT_CONNECTION_TIMEOUT_MIN_S, RAFT_LEADER_FALLBACK_MIN_S = 2.0, 2.0
# pysyncobj's own TCP transport and resolver are replaced here by the TLS transport and
# peer addresses from rt.yaml; their settings are given all the same: socket buffers,
# reconnect and rebind pauses, and how long DNS answers and failures are cached.
RAFT_SOCKET_BUFFER_BYTES = 1 << 20
RAFT_CONNECTION_RETRY_S, RAFT_BIND_RETRY_S = 1.0, 1.0
RAFT_DNS_CACHE_S, RAFT_DNS_FAIL_CACHE_S = 600.0, 30.0
# While the disk is full the journal tries to grow this often, and logs it this often.
JOURNAL_FULL_RETRY_S, JOURNAL_FULL_LOG_EVERY_S = 0.2, 30.0

# -- Spark -----------------------------------------------------------------------------

# Rows per Arrow batch handed to Spark, or payload bytes, whichever comes first.
SPARK_BATCH_ROWS, SPARK_BATCH_BYTES = 65536, 32 << 20
# A batch read is split into partitions of about this many bytes: each task has a fixed
# CPU cost whatever it reads, so few, large ones (docs/BENCHMARKS.md, "Figures behind the
# limits and defaults").
DEFAULT_SPLIT_BYTES = 128 << 20
# Arrow's JSON reader parses a batch's payloads, one a line, in blocks of this size: one
# block holds a whole batch, so no payload straddles two blocks (which Arrow refuses).
ARROW_JSON_BLOCK_BYTES = 1 << 30
# Open files of a Spark unit: a JVM holds every jar of Spark open, and Parquet files
# and sockets.
SPARK_NOFILE = 65536
# CPU weight of a Spark unit: below the transport's daemons (100..300), the stream first.
SPARK_CPU_WEIGHT = 50
# Watchdog of the pipeline's unit: it pings between micro-batches, not within one.
SPARK_WATCHDOG_S = 60
# The Spark worker's own heap (SPARK_DAEMON_MEMORY), beside what it offers executors.
SPARK_WORKER_DAEMON_MEMORY = 512 << 20
# What a JVM takes beyond its heap, at the least (metaspace, code cache, thread stacks,
# Arrow's direct buffers, Python workers): half the heap, or this if more.
SPARK_JVM_OVERHEAD_MIN_BYTES = 1 << 30

# -- Daemons ---------------------------------------------------------------------------

# Memory a daemon needs (checked against each role's MemoryMax by rt.yaml validation):
# a Python daemon with its libraries, plus per replication connection a few frames
# (what a daemon's memory grows by moving the largest records: docs/BENCHMARKS.md,
# "Figures behind the limits and defaults"; the base covers the rest), plus for the
# sequencer a few copies of the largest record (it builds a merged record from the
# input bytes and checks it against the commit).
DAEMON_BASE_BYTES = 128 << 20
FRAMES_PER_CONNECTION = 8
RECORD_COPIES = 4
# Files a transport daemon holds besides its connections (LimitNOFILE= of its unit): a
# base, plus so many per host and publisher topic.
NOFILE_BASE, NOFILE_PER_PEER = 4096, 64
# glibc's malloc: buffers from this size on are mmaps, returned to the system when
# freed, so a frame-sized buffer does not stay in the heap ...
MMAP_THRESHOLD_BYTES = 1 << 20
# ... and at most this many arenas, which bounds what worker threads keep.
MALLOC_ARENA_MAX = 2
# systemd: how often the status line is looked at when no watchdog is set, and the
# shortest watchdog ping interval (half of WatchdogSec otherwise).
STATUS_LINE_EVERY_S, WATCHDOG_PING_MIN_S = 1.0, 0.01
# The metrics endpoint: a whole request must arrive within this of the connection (a
# slow client cannot hold a thread).
METRICS_REQUEST_TIMEOUT_S = 10.0
# The metrics endpoint's connections served at once (a scraper needs one), and its
# listen backlog (socketserver's 5 drops bursts of connects).
METRICS_MAX_CONNECTIONS, METRICS_LISTEN_BACKLOG = 16, 64
# The metrics endpoint logs each kind of refusal at most this often.
METRICS_LOG_EVERY_S = 10.0
# Asking nodes for their status (`rt status`): the wait for each connection and answer.
NODE_STATUS_TIMEOUT_S = 8.0
# A status poller that keeps its connections open waits less, and does not dial a node
# that was unreachable again within the retry pause.
NODE_STATUS_POLL_TIMEOUT_S, NODE_STATUS_POLL_RETRY_S = 2.0, 0.5
# Trace files: written through a buffer of this size, flushed at most this often.
TRACE_BUFFER_BYTES, TRACE_FLUSH_S = 1 << 16, 0.5
# A clock skew file (tests) is read again at most this often.
CLOCK_SKEW_REREAD_S = 0.1

# -- Certificates ----------------------------------------------------------------------

# Default validity of the stream's CA and of host certificates (`rt certs`): a host
# certificate is renewed well before its CA ends, and one that would outlive the CA is
# cut short.
CA_CERT_DAYS, HOST_CERT_DAYS = 3650, 825
# A new certificate's validity starts this far back, so a peer whose clock is a little
# behind accepts it.
CERT_BACKDATE_MINUTES = 5

# -- Relations -------------------------------------------------------------------------

invariant(OFFSET_BITS + ROLL_BITS + SESSION_BITS == 64, "position fields fill 64 bits")
invariant(MAX_ROLL_BYTES <= MAX_FILE_BYTES + 1, "a rolled file's end offset fits in a position")
invariant(MIN_ROLL_BYTES <= DEFAULT_ROLL_BYTES <= MAX_ROLL_BYTES, "default roll size in range")
invariant(MAX_PAYLOAD_BYTES < MAX_FILE_BYTES // 2, "a maximal record fits in a maximal file")
invariant(READ_CHUNK_BYTES >= 1 << 16, "read chunks are not tiny")
invariant(0 < DEFAULT_BATCH_MESSAGES <= MAX_BATCH_MESSAGES, "default batch within its bound")
invariant(0 < DEFAULT_FSYNC_INTERVAL_MS <= MAX_FSYNC_INTERVAL_MS, "fsync interval in range")
invariant(BUDGET_POLL_MIN_S < BUDGET_POLL_MAX_S, "budget poll backoff grows")

invariant(FOLLOW_CHUNK_BYTES <= READ_CHUNK_BYTES, "a follower's first read grows to a read chunk")
invariant(
    TORN_HEADER_PROBE_BYTES >= MAX_FILE_HEADER_BYTES, "the torn-header check sees a whole header"
)
invariant(UNBOUNDED_SCAN_RECORDS > MAX_FILE_BYTES, "an unbounded scan outlasts any buffer")
invariant(BUDGET_MIN_ROLLS >= 2, "a budget holds the file being written and a rolled one")
invariant(PUSH_IDLE_WAIT_S <= LAG_UPDATE_S, "an idle push client updates its lag on time")
invariant(OBSERVE_EVERY_S <= HEARTBEAT_EVERY_S, "the observer runs often enough for the heartbeat")
invariant(OBSERVE_EVERY_S <= GAUGES_EVERY_S, "the observer runs often enough for the gauges")
invariant(LAG_PROBE_S < LAG_WINDOW_S, "the loop-lag window holds several samples")
invariant(
    max(RAFT_APPEND_BATCH_BYTES, RAFT_SNAPSHOT_BATCH_BYTES) < MAX_RAFT_FRAME,
    "a batch of raft entries and a piece of a snapshot fit in a raft frame",
)
invariant(RAFT_DIAL_BACKOFF_FIRST_S < RAFT_DIAL_BACKOFF_MAX_S, "raft dial backoff grows")
invariant(RAFT_TIMER_SLACK_S < RAFT_TICK_S, "a raft timer tick comes before the next tick")
invariant(RAFT_TICK_S <= RAFT_FOLLOWER_TICK_S, "a follower's timer is no busier than a leader's")
invariant(RAFT_QUIET_ANSWERS_PER_FALLBACK >= 2, "a lost answer does not unseat the leader")
invariant(JOURNAL_FULL_RETRY_S < JOURNAL_FULL_LOG_EVERY_S, "a full journal is logged, not spammed")
invariant(
    SPARK_BATCH_BYTES
    + max(READ_CHUNK_BYTES, MAX_PAYLOAD_BYTES)
    + SPARK_BATCH_ROWS
    + MAX_BATCH_MESSAGES
    <= ARROW_JSON_BLOCK_BYTES,
    "a Spark batch's payloads, one a line, parse as one Arrow JSON block",
)
invariant(HOST_CERT_DAYS <= CA_CERT_DAYS, "a host certificate does not outlive its CA")
invariant(HEARTBEAT_EVERY_S < SEQUENCER_STALE_S, "a live sequencer's heartbeat is never stale")
invariant(LEADER_CHECK_S < REPORT_ANSWER_S, "the leader is looked at while an answer is awaited")
invariant(REPORT_ASK_S < REPORT_ANSWER_S, "a report asks again well before an answer is overdue")
invariant(REPORT_WINDOW >= 4, "half the window leaves room for an answer to come back")
invariant(LEADER_INPUT_LAGGING_S > LEADER_INPUT_BEHIND_S, "a copy that grows is given longer")
invariant(FILE_ENDS_KEPT >= FILE_ENDS_REPORTED, "a leader crosses as many file ends as reports")
