"""The console's pages, one module per page (route handlers; what they show is in ``rules``)."""
