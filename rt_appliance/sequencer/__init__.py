"""The sequencer: raft-ordered merging of every input into one merged log."""
