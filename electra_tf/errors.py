"""The one exception type for bad user input.

Every stage raises `InputError` when a file, line, flag or field is wrong; its message names
the culprit. The CLIs print it as a single line and exit with status 2 instead of a traceback.
"""


class InputError(ValueError):
    """Bad user input: the message names the file, line, flag or field at fault."""
