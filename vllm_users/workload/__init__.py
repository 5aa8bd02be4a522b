"""What is sent: prompts, datasets, shared prefixes, schemas, arrival schedules."""
