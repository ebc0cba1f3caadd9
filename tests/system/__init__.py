"""Cross-cutting tests: kill -9 crash safety, hostile input, privacy, concurrency on one data dir, scale."""
