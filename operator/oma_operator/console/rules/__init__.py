"""What the console shows, computed without I/O: a request's content as rows of escaped values
(``content_view``) and what changed since an earlier request (``content_diff``)."""
