"""Small shared helpers every stage may use: errors, sizes and their wording, locks, secrets' redaction, file writing, fault hooks for tests, finding codes."""
