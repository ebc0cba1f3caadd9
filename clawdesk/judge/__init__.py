"""Judge stage: next-state scoring and hindsight hints (prompts, output parsing, vote rules)."""
