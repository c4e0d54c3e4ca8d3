"""Values the operator read from Secrets, masked in everything it shows.

The operator reads one kind of Secret value: a TeamRun's store URL (``stores.StoreCache``), which
remembers each value it reads here. Errors about such a value are built to show none of it
(``oma.store.urls.open_secret_store``), and the stores mask passwords in theirs; this is the belt
to those braces, for a message that quotes a value anyway (a driver's, a future one's, a runner's
termination message): the conditions (``status.condition``), Events (``events``), the
``Reconciled`` reports (``runs.trouble``) and every log record (``install_log_masking``, set up by
``main``) go through ``mask``.

Every form of a value (``oma.store.remote.secret_forms``: as written, trimmed, percent-decoded,
escaped, and each password or secret parameter in it) of at least ``MIN_LENGTH`` characters is
masked; shorter ones would mask ordinary words all over the log (the stores still mask a short
password in a URL, which they find by position).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from oma.store.remote import secret_forms

MIN_LENGTH = 4
VALUES_KEPT = 4096  # distinct values remembered (rotations add some; the oldest are forgotten)
MASK = "***"


class SecretValues:
    def __init__(self) -> None:
        self._forms: OrderedDict[str, tuple[str, ...]] = OrderedDict()

    def remember(self, value: str) -> None:
        if value in self._forms:
            self._forms.move_to_end(value)
            return
        self._forms[value] = tuple(f for f in secret_forms(value) if len(f) >= MIN_LENGTH)
        while len(self._forms) > VALUES_KEPT:
            self._forms.popitem(last=False)

    def mask(self, text: str) -> str:
        for forms in self._forms.values():
            for form in forms:  # longest first: a value before the password inside it
                if form in text:
                    text = text.replace(form, MASK)
        return text

    def __len__(self) -> int:
        return len(self._forms)


SECRETS = SecretValues()


def remember(value: str) -> None:
    """``value`` was read from a Secret: mask it from now on."""
    SECRETS.remember(value)


def mask(text: str) -> str:
    """``text`` with every remembered Secret value masked."""
    return SECRETS.mask(text) if len(SECRETS) else text


def install_log_masking() -> None:
    """Mask remembered Secret values in every log record the process makes, whichever logger
    and handler (kopf's, which also posts Events from some records, included): the message, and
    the traceback of an exception logged with it. Idempotent."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "masks_secrets", False):
        return

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if len(SECRETS):
            mask_record(record)
        return record

    make.masks_secrets = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make)


def mask_record(record: logging.LogRecord) -> None:
    """Mask a record in place: its message formatted now (only when something is masked), and
    its exception's traceback formatted into ``exc_text``, which formatters print instead (the
    exception itself is dropped from the record then, so no formatter prints it unmasked)."""
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: logging reports it when it formats
        return
    masked = mask(message)
    if masked != message:
        record.msg, record.args = masked, ()
    if record.exc_info and record.exc_info[1] is not None:
        text = logging.Formatter().formatException(record.exc_info)
        masked = mask(text)
        if masked != text:
            record.exc_text, record.exc_info = masked, None
    if record.stack_info:
        record.stack_info = mask(record.stack_info)
