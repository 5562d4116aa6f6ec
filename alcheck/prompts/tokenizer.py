"""The target's tokenizer, loaded safely; `--chat-template FILE`; and a hash of prompt token ids.

Sentencepiece-only folders (LLaMA-1/2, Vicuna: `tokenizer.model`, no `tokenizer.json`) are
converted by transformers, which needs the sentencepiece and protobuf packages. Without them
transformers falls back to reading the file as tiktoken and fails with unrelated messages, so
both are checked first.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Sequence
from pathlib import Path

from alcheck.errors import AlcheckError

# Tokenizer classes for which `legacy` means what the comment in _tokenizer_kwargs says.
_LLAMA_CLASSES = {None, "LlamaTokenizer", "LlamaTokenizerFast"}
_TIKTOKEN_LINE = re.compile(rb"^[A-Za-z0-9+/]+=* \d+$")


def prompt_hash(ids: Sequence[int]) -> str:
    """16 hex digits of sha256 over the ids as little-endian int32: equal prompts, equal hashes."""
    ids = [int(t) for t in ids]
    try:
        data = struct.pack(f"<{len(ids)}i", *ids)
    except struct.error:
        raise ValueError("token ids must fit in int32") from None
    return hashlib.sha256(data).hexdigest()[:16]


# --------------------------------------------------------------------------- --chat-template


def read_chat_template(path: str | Path) -> str:
    """The text of a Jinja chat template file, compiled once to reject syntax errors early."""
    path = Path(path).expanduser()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise AlcheckError(f"--chat-template {path}: no such file: pass a Jinja chat template file") from None
    except IsADirectoryError:
        raise AlcheckError(f"--chat-template {path} is a directory: pass the .jinja file itself") from None
    except OSError as e:
        raise AlcheckError(
            f"--chat-template {path}: cannot read it ({e.strerror or e}): check its permissions"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise AlcheckError(
            f"--chat-template {path} is not UTF-8 text: pass a Jinja chat template file"
        ) from None
    if not text.strip():
        raise AlcheckError(f"--chat-template {path} is empty: pass a Jinja chat template file")
    _compile(text, path)
    return text


def _compile(text: str, path: Path):
    import jinja2

    try:  # transformers' own environment (its filters, globals and {% generation %} tag)
        from transformers.utils.chat_template_utils import _compile_jinja_template as compile_template
    except ImportError:  # pragma: no cover - older or newer transformers: plain sandboxed Jinja
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        compile_template = env.parse
    try:
        compile_template(text)
    except jinja2.TemplateError as e:
        line = getattr(e, "lineno", None)
        where = f" line {line}" if line else ""
        detail = (getattr(e, "message", None) or str(e) or type(e).__name__).splitlines()[0]
        raise AlcheckError(
            f"--chat-template {path}{where} is not a valid Jinja template ({detail}): fix the template"
        ) from None


def check_chat_template(path: str | Path | None, protocol) -> str | None:
    """Validate `--chat-template` for a protocol before anything loads; the path as a string."""
    if path is None:
        return None
    if getattr(protocol, "fastchat", None):
        raise AlcheckError(
            f"--chat-template is not used by --protocol {protocol.name}, which builds FastChat's "
            f"{protocol.fastchat} prompt string itself: drop --chat-template or pick a chat-template protocol"
        )
    read_chat_template(path)
    return str(path)


# --------------------------------------------------------------------------- loading


def _read_tokenizer_config(directory: Path, what: str) -> dict:
    file = directory / "tokenizer_config.json"
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise AlcheckError(
            f"{what}: {file} is not valid JSON ({getattr(e, 'msg', e)}): re-download it"
        ) from None
    if not isinstance(data, dict):
        raise AlcheckError(f"{what}: {file} is not a JSON object: re-download it")
    return data


def _check_sentencepiece(file: Path, what: str):
    """A sentencepiece-only tokenizer: the packages its conversion needs, and a readable model."""
    missing = []
    try:
        import sentencepiece
    except ImportError:
        missing.append("sentencepiece")
    try:
        import google.protobuf  # noqa: F401 - transformers parses the model proto with it
    except ImportError:
        missing.append("protobuf")
    if missing:
        raise AlcheckError(
            f"{what}: {file} is a sentencepiece tokenizer (no tokenizer.json), which needs the "
            f"{' and '.join(missing)} package{'s' if len(missing) > 1 else ''}: "
            f"pip install {' '.join(missing)}"
        )
    try:
        sentencepiece.SentencePieceProcessor(model_file=str(file))
    except Exception as e:  # noqa: BLE001 - sentencepiece raises RuntimeError/OSError variants
        with open(file, "rb") as f:
            head = f.readline().strip()
        if _TIKTOKEN_LINE.match(head):
            raise AlcheckError(
                f"{what}: {file} is a tiktoken file (Meta's original/ format), not a sentencepiece model: "
                "pass the Hugging Face folder that has tokenizer.json"
            ) from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise AlcheckError(
            f"{what}: {file} is not a readable sentencepiece model ({first}): re-download it"
        ) from None


def _tokenizer_kwargs(directory: Path, what: str) -> dict:
    if (directory / "tokenizer.json").is_file() or not (directory / "tokenizer.model").is_file():
        return {}
    _check_sentencepiece(directory / "tokenizer.model", what)
    config = _read_tokenizer_config(directory, what)
    # Without a `legacy` key, transformers 4 (slow and fast) tokenized text after a special token
    # with sentencepiece's dummy "▁" prefix, as the EAGLE scripts and FastChat saw it (Vicuna's
    # "</s>USER" -> "</s>", "▁USER"); transformers 5 defaults to legacy=False. Keep the old meaning.
    if "legacy" not in config and config.get("tokenizer_class") in _LLAMA_CLASSES:
        return {"legacy": True}
    return {}


def _config_problem(directory: Path, what: str) -> AlcheckError | None:
    """The error in config.json that made AutoTokenizer fail (it reads config.json to pick the
    tokenizer class), or None when config.json reads fine."""
    from alcheck.models.config import ConfigError, hf_llama_config

    file = directory / "config.json"
    if not file.is_file():
        return None
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return AlcheckError(
            f"{what}: {file} is not valid JSON ({getattr(exc, 'msg', exc)}): re-download or fix it"
        )
    if not isinstance(raw, dict):
        return None
    try:
        if raw.get("model_type", "llama") == "llama":
            hf_llama_config(raw)
        else:  # an --engine target of another family: transformers' own class for it
            from transformers import AutoConfig

            AutoConfig.from_pretrained(str(directory), trust_remote_code=False)
    except ConfigError as exc:
        return exc.alcheck_error(what, file)
    except Exception as exc:  # noqa: BLE001 - whatever transformers' config class raises
        return AlcheckError(
            f"{what} {file}: transformers rejects it ({str(exc).strip().splitlines()[-1][:300]}): "
            "fix config.json"
        )
    return None


def load_tokenizer(directory: Path, what: str, chat_template: str | None = None):
    """The tokenizer in a checkpoint folder (never remote code); `chat_template` is a Jinja file
    whose text replaces the tokenizer's own template."""
    directory = Path(directory)
    template = read_chat_template(chat_template) if chat_template else None
    kwargs = _tokenizer_kwargs(directory, what)  # checks the sentencepiece packages first
    # imported after that check: transformers caches whether sentencepiece and protobuf import
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), trust_remote_code=False, **kwargs)
    except Exception as exc:  # noqa: BLE001
        config_problem = _config_problem(directory, what)
        if config_problem is not None:  # AutoTokenizer reads config.json: blame what really failed
            raise config_problem from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise AlcheckError(
            f"{what}: cannot load the tokenizer in {directory} ({type(exc).__name__}: {first[:300]}): "
            "the folder needs tokenizer.json, or tokenizer.model (sentencepiece) with tokenizer_config.json"
        ) from None
    if template is not None:
        tokenizer.chat_template = template
        tokenizer.alcheck_chat_template_file = str(chat_template)  # errors name the file, not the target
    vocab = _config_vocab_size(directory)
    if vocab is not None and len(tokenizer) > vocab:  # prompt ids are checked against it (protocols.py)
        tokenizer.alcheck_vocab_limit = (vocab, directory / "config.json")
    return tokenizer


def _config_vocab_size(directory: Path) -> int | None:
    try:
        value = json.loads((directory / "config.json").read_text(encoding="utf-8")).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def check_ids_in_vocab(tokenizer, ids: Sequence[int]) -> None:
    """A tokenizer with more tokens than the model's config.json vocab_size can give prompt ids the
    model cannot embed (an IndexError deep in a run): refused in one line, naming the token."""
    limit = getattr(tokenizer, "alcheck_vocab_limit", None)
    if limit is None:
        return
    vocab, config = limit
    bad = next((int(t) for t in ids if int(t) >= vocab), None)
    if bad is not None:
        token = tokenizer.convert_ids_to_tokens(bad)
        raise AlcheckError(
            f"a prompt holds token id {bad} ({token!r}) but {config} has vocab_size {vocab} (the "
            f"tokenizer has {len(tokenizer)} tokens): the model cannot embed it: pass the tokenizer "
            "that belongs to this model"
        )
