"""``choir.tts.speak``: text to speech, written to ``.choirtmp/send/`` in the workspace.

As in the seed, the tool takes the lock ``choirtmp:X`` and speaks with the agent's voice
profile (the plugin's ``voice``, unless the call names another). The audio is a WAV file
named by the hash of what was synthesised, so the same words in the same voice give the
same file. The synthesizer is pluggable (:class:`Synthesizer`); the example one,
:class:`ToneSynthesizer`, is deterministic and needs nothing installed: one short tone per
letter, silence for spaces -- enough to test the whole path without a speech engine.
"""

from __future__ import annotations

import io
import math
import wave
from typing import Annotated, Any, Final, Protocol, runtime_checkable

import numpy as np
from pydantic import ConfigDict, Field

from stargraph._typed import TypedModel
from stargraph.errors import ToolArgumentError
from stargraph.plugin.hookspecs import hookimpl
from stargraph.tools._canonical import sha256_hex
from stargraph.tools._result import ToolOutput
from stargraph.tools._tool import PythonTool, ToolContext, tool

__all__ = ["OUTBOX", "SpeakArgs", "SpeechPlugin", "Synthesizer", "ToneSynthesizer", "tts_tool"]

OUTBOX: Final = ".choirtmp/send"
"""Where spoken audio goes, relative to the workspace root."""

_VOICE = r"^[a-z][a-z0-9_+-]{0,31}$"


@runtime_checkable
class Synthesizer(Protocol):
    """Turns text into WAV bytes for a voice."""

    @property
    def name(self) -> str:
        """Engine name and version; part of the audio file's hash."""
        ...

    def synthesize(self, text: str, voice: str) -> bytes:
        """A complete WAV file."""
        ...


class ToneSynthesizer:
    """A deterministic stand-in for a speech engine: 8 kHz mono 16-bit PCM, one 40 ms tone
    per character (its pitch from the character and the voice), 40 ms of silence per space.
    """

    RATE: Final = 8000
    _CHAR_S: Final = 0.04

    @property
    def name(self) -> str:
        """``tone-v1``."""
        return "tone-v1"

    def synthesize(self, text: str, voice: str) -> bytes:
        """The WAV bytes of ``text``."""
        per_char = int(self.RATE * self._CHAR_S)
        shift = sum(voice.encode()) % 200
        t = np.arange(per_char, dtype=np.float64) / self.RATE
        chunks = []
        for char in text:
            if char.isspace():
                chunks.append(np.zeros(per_char))
            else:
                freq = 200 + shift + (ord(char) % 64) * 12
                chunks.append(0.3 * np.sin(2 * math.pi * freq * t))
        samples = np.concatenate(chunks) if chunks else np.zeros(0)
        pcm = (samples * 32767).astype("<i2").tobytes()
        buffer = io.BytesIO()
        with wave.open(buffer, "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(self.RATE)
            out.writeframes(pcm)
        return buffer.getvalue()


class SpeakArgs(TypedModel):
    """Speak text aloud: synthesise it to a WAV file in the outbox (.choirtmp/send/)."""

    typed_error = ToolArgumentError

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: Annotated[str, Field(min_length=1, max_length=2000, description="What to say.")]
    voice: Annotated[
        str | None,
        Field(pattern=_VOICE, description="Voice to use; default: the agent's voice profile."),
    ] = None


def tts_tool(synthesizer: Synthesizer | None = None, *, voice: str = "default") -> PythonTool:
    """``choir.tts.speak@1.0.0`` speaking with ``synthesizer`` in ``voice`` by default."""
    engine = synthesizer if synthesizer is not None else ToneSynthesizer()

    @tool(
        id="choir.tts.speak@1.0.0",
        side_effect="write",
        locks=("choirtmp:X",),
        timeout_s=30,
        idempotent=True,
        args_model=SpeakArgs,
    )
    def tts_speak(ctx: ToolContext, args: SpeakArgs) -> ToolOutput:
        """Speak text aloud: synthesise it to a WAV file in the outbox (.choirtmp/send/)."""
        chosen = args.voice or voice
        audio = engine.synthesize(args.text, chosen)
        digest = sha256_hex(f"{engine.name}\0{chosen}\0{args.text}".encode())[:16]
        relative = f"{OUTBOX}/{digest}.wav"
        ctx.workspace.write_bytes(relative, audio, tool=ctx.tool)
        with wave.open(io.BytesIO(audio), "rb") as reader:
            seconds = reader.getnframes() / reader.getframerate()
        return ToolOutput(
            summary=f"spoke {len(args.text)} characters ({seconds:.2f}s) to {relative}",
            payload={
                "path": relative,
                "bytes": len(audio),
                "seconds": round(seconds, 3),
                "voice": chosen,
                "engine": engine.name,
            },
        )

    return tts_speak


class SpeechPlugin:
    """Example plugin: ``choir.tts.speak`` with ``synthesizer`` (default
    :class:`ToneSynthesizer`) and the agent's voice profile ``voice``."""

    def __init__(self, synthesizer: Synthesizer | None = None, *, voice: str = "default") -> None:
        self.speak = tts_tool(synthesizer, voice=voice)

    @hookimpl
    def register_tools(self, register: Any) -> None:
        """Register the tool."""
        register(self.speak)
