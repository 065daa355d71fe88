"""Episodes whose prompt is a conversation (a row of messages): the environment's messages join it through the model's
chat template, as the model was tuned to read them, instead of as bare text after the policy's turn.

    prompt     the row's messages, and the environment's opening as one more message, then the assistant's turn opened;
               an episode's tools (Episode.tools) as the template renders tools (its `tools`), or, where it renders
               none, as text heading the opening
    a reply    the end the template gives an assistant's message (what the policy did not write of it: none of it when
               the policy's turn ended with the EOS token that ends a message), then the environment's text as a
               message of environment.chat_role, then the assistant's next turn opened

    a tool's    with chat_role: tool, the result of a call the policy made (an MCP tool environment's) goes to the
    result      template as its own tool message: the assistant's message carries the call (name, arguments, id) and
                the tool message the result as the tool gave it, with the call's id and name, so the template frames
                it as the model was tuned to read results (Qwen's <tool_response> tags, DeepSeek's and Kimi's tool
                tokens, harmony's functions.NAME message); what the template writes after the call the policy wrote
                (the end of its turn) comes first. A turn with no call is answered as the other messages are (as
                user, where the template takes tool messages only after a call)

What the template writes is found by rendering a stub conversation whose assistant message is a marker, followed by
the new message: what follows the marker is what to append. Earlier turns are never rendered again, so a template
that writes an assistant's message differently once another follows (Qwen3's drops an empty thinking block then)
still appends to the tokens the policy sampled. A template that refuses the role, or drops the assistant's message
altogether, is a DataError naming environment.chat_role.
"""

from __future__ import annotations

import json
import os
from typing import Any

from trainer_core.data import DataError
from trainer_core.environments.base import ToolResult
from trainer_core.environments.tool_calls import listed
from trainer_core.environments.tool_formats import FORMATS
from trainer_core.rollout.rollouts import require_chat_template

_MARK = "rlplaneturnmark"  # an assistant message's stand-in content: letters only, so no template trims it
FIELD = "environment.chat_role"


class ChatTurns:
    def __init__(self, tokenizer: Any, role: str, tool_format: str = "hermes") -> None:
        require_chat_template(tokenizer)
        self.tokenizer, self.role, self.tool_format = tokenizer, role, tool_format
        self._stub = [{"role": "user", "content": "?"}, {"role": "assistant", "content": _MARK}]
        self._eos = tokenizer.eos_token or ""
        self.close = FORMATS[tool_format].close
        self.plain_role = role  # the role of an answer that is no tool's result
        try:
            self.reply("?", ended_with_eos=False)  # a role the template refuses fails the run here, before any episode
        except DataError:
            if role != "tool":
                raise
            self.plain_role = "user"  # a template that takes tool messages only after a call (harmony's)
            self.reply("?", ended_with_eos=False, tool=ToolResult(_MARK, {}, None, "?"))
        probe = [{"type": "function", "function": {"name": _MARK, "description": "", "parameters": {"type": "object"}}}]
        try:
            self.renders_tools = _MARK in tokenizer.apply_chat_template(self._stub[:1], tools=probe, tokenize=False)
        except Exception:  # a template that cannot take tools renders none
            self.renders_tools = False

    def prompt(self, messages: list[dict], opening: str, tools: list[dict] | None = None) -> list[int]:
        """The conversation's ids with the environment's opening as its last message (none when empty) and its
        tools, the assistant's turn opened."""
        native = tools if tools and self.renders_tools else None
        if tools and native is None:
            opening = listed(tools, self.tool_format) + opening
        if opening:
            messages = [*messages, {"role": self.role, "content": opening}]
        return list(
            self.tokenizer.apply_chat_template(
                messages, tools=native, tokenize=True, add_generation_prompt=True, return_dict=False
            )
        )

    def reply(self, text: str, *, ended_with_eos: bool, tool: ToolResult | None = None) -> str:
        """The text that follows the policy's turn when the environment answers `text` (the result of `tool`)."""
        if tool is not None and self.role == "tool":
            return self._tool_message(tool, ended_with_eos)
        rendered = self._render([*self._stub, {"role": self.plain_role, "content": text}], generation_prompt=True)
        at = rendered.find(_MARK)
        if at < 0:
            raise DataError(
                f"{FIELD}: the model's chat template drops an assistant's message once a {self.plain_role!r} message follows "
                "it, so an episode's turns cannot be appended as they are played; use plain-text prompts "
                "(prompt/completion rows) for this model"
            )
        after = rendered[at + len(_MARK) :]  # the end of the assistant's message, the new one, the next turn opened
        return after[len(self._eos) :] if ended_with_eos and self._eos and after.startswith(self._eos) else after

    def _tool_message(self, tool: ToolResult, ended_with_eos: bool) -> str:
        """The end of the assistant's turn the policy did not write, then the template's tool message with the
        result, then the assistant's next turn opened."""
        call_id = tool.call_id or "call00001"  # Mistral's templates take 9 letters or digits
        answered = {"role": "tool", "content": tool.text, "tool_call_id": call_id, "name": tool.name}

        def rendered(arguments: Any) -> tuple[str, str]:
            """The stub with the call, alone and then answered with the next turn opened."""
            call = {"id": call_id, "type": "function", "function": {"name": tool.name, "arguments": arguments}}
            asked = [self._stub[0], {**self._stub[1], "tool_calls": [call]}]
            return self._render(asked, generation_prompt=False), self._render([*asked, answered], generation_prompt=True)

        try:
            own, whole = rendered(tool.arguments)
        except DataError:  # DeepSeek's templates join the arguments as JSON text
            own, whole = rendered(json.dumps(tool.arguments))
        at = own.find(_MARK)
        if at < 0 or not whole.startswith(own[:at]):
            raise DataError(f"{FIELD}: the model's chat template drops an assistant's tool call once a tool message follows")
        own, whole = own[at + len(_MARK) :], whole[at + len(_MARK) :]
        same = len(os.path.commonprefix([own, whole]))  # the call as the template writes it, and its turn's end
        written = own[:same]
        if self.close is not None:  # the policy's turn stopped at the end of its call: the template's rest follows
            end = written.rfind(self.close)
            tail = written[end + len(self.close) :] if end >= 0 else ""
        else:  # it ended with the EOS token
            end = written.rfind(self._eos) if self._eos else -1
            tail = "" if end < 0 else written[end + len(self._eos) :] if ended_with_eos else written[end:]
        return tail + whole[same:]

    def _render(self, messages: list[dict], *, generation_prompt: bool) -> str:
        try:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
        except Exception as exc:  # jinja's TemplateError, or the template's own raise_exception(...)
            raise DataError(
                f"{FIELD}: the model's chat template refused a {self.role!r} message after the assistant's ({exc}); "
                "set the role it gives an environment's or a tool's answers, e.g. user or tool"
            ) from None
