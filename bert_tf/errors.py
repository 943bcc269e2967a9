"""Errors that mean "the user gave us something wrong", not "the code is broken".

Entry points catch `BertTfError` and print its one-sentence message instead of a
traceback; everything else is a bug and keeps its traceback.
"""


class BertTfError(ValueError):
    """A user mistake: a bad flag, file, config or checkpoint. The message is one
    sentence that names the file or flag and says what to do."""
