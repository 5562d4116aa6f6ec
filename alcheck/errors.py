"""The one error type users see: a one-line message that names the problem and the fix."""

import click


class AlcheckError(click.ClickException):
    """Bad input or an unusable environment. The CLI prints `Error: <message>` and exits 2."""

    exit_code = 2
