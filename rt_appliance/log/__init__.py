"""Stream files: the one format of publisher logs, node replicas and the merged log."""
