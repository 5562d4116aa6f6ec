"""The one error type users see: a one-line message that names the problem and the fix."""

import click


class AlcheckError(click.ClickException):
    """Bad input or an unusable environment. The CLI prints `Error: <message>` and exits 2."""

    exit_code = 2


class NonFiniteLogits(AlcheckError):
    """The target produced NaN/inf logits: every AL after that would be meaningless."""

    def __init__(self, request_id: int, step: int, who: str | None = None):
        self.request_id, self.step = request_id, step
        where = "the prefill" if step == 0 else f"verification step {step}"
        who = who or f"request {request_id} (its index in this batch of prompts)"
        super().__init__(
            f"the target's logits are not finite (NaN or inf) at {where} of {who}: check the "
            "weights, or use --dtype bfloat16 or float32 (float16 overflows easily)"
        )
