"""The oma operator: TeamRun -> one runner pod per attempt, resumed after evictions and crashes."""
