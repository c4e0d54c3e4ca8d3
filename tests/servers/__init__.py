"""Real servers (redis-server, postgres) run as child processes of the test session."""
