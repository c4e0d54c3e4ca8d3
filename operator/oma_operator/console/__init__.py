"""The reviewer's console (issue 44, under way): what a decision page shows of a request,
derived from the exact content its hash binds (``rules``: pure)."""
