"""Environments of multi-turn GRPO, without a policy: the calculator and its data, the HTTP protocol against the
reference server in its own process, python entrypoints (ours and OpenEnv's). The sandbox: tests/test_sandbox.py."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlplane.spec.environments import HttpEnvironment as HttpSpec
from rlplane.spec.environments import OpenEnvEnvironment, PythonEnvironment
from tests.harness.environments import played, replied, served_calculator, served_openenv
from trainer_core.data.tasks import calculator as task
from trainer_core.environments import EnvError, Episode, make_environment, tool_calls
from trainer_core.environments.calculator import Calculator, ExpressionError, calculate

# --- the calculator ---


@pytest.mark.parametrize("text, value", [("17*23", 391), (" 2 + 3*4 ", 14), ("(1+2)*-3", -9), ("7/2", 3.5), ("9//2%3", 1)])
def test_calculate_evaluates_arithmetic(text: str, value: float) -> None:
    assert calculate(text) == value


@pytest.mark.parametrize(
    "text, why",
    [("17*", "not an arithmetic"), ("__import__('os')", "Call is not allowed"), ("9**99", "Pow"), ("1/0", "division"),
     ("99999999*99999999", "1e15"), ("1+" * 40 + "1", "longer than 64")],
)  # fmt: skip
def test_calculate_refuses_what_is_not_plain_arithmetic(text: str, why: str) -> None:
    with pytest.raises(ExpressionError, match=why.replace("(", r"\(")):
        calculate(text)


def test_calculator_answers_calls_and_judges_the_final_answer() -> None:
    row = {"prompt": "37*48=", "answer": "1776"}
    call, final = played(Calculator(), row, "<calc>37*48</calc>", "1776</s>")
    assert (call.text, call.done, call.tool_call, call.error) == ("<result>1776</result>", False, True, False)
    assert final.done and final.reward == 1.0 and final.components == {"correct": 1.0} and final.reason is None
    (wrong,) = played(Calculator(), row, "1700")
    assert wrong.done and wrong.reward == 0.0 and not wrong.error
    bad, after = played(Calculator(), row, "<calc>37*</calc>", "<calc>37*48</calc>")
    assert bad.text == "<result>error</result>" and bad.error and bad.reason.startswith("malformed call '37*'")
    assert after.text == "<result>1776</result>"  # the policy may try again
    (left_open,) = played(Calculator(), row, "<calc>37*48")
    assert left_open.done and left_open.reward == 0.0 and left_open.error and "left open" in left_open.reason
    (unchecked,) = played(Calculator(), {"prompt": "1+1="}, "2")
    assert unchecked.reward == 0.0 and "no answer column" in unchecked.reason
    verdict = Calculator().cut_off(Episode(row=row, messages=[("policy", "x")]), "max_turns")
    assert verdict.done and verdict.reward == 0.0 and verdict.reason == "cut off by max_turns after 1 turns"


def test_calculator_data_shows_the_tool_on_a_share_of_rows_and_holds_problems_out() -> None:
    sft, prompts = task.sft_examples(seed=0), task.prompt_examples(seed=0)
    assert len(sft.train) + len(sft.eval) == 90 * 90 and len(prompts.eval) == len(sft.eval) == 810
    assert {r["prompt"] for r in sft.eval} == {r["prompt"] for r in prompts.eval}  # held out in both kinds
    assert not {r["prompt"] for r in sft.eval} & {r["prompt"] for r in sft.train}
    calls = [r for r in sft.train if r["completion"].startswith("<calc>")]
    assert abs(len(calls) / len(sft.train) - task.TOOL_SHARE) < 0.03
    assert task.tool_completion(37, 48) == "<calc>37*48</calc><result>1776</result>1776"
    for row in sft.train[:50]:  # a call or not, the completion ends with the product
        a, b = map(int, row["prompt"].removesuffix("=").split("*"))
        assert row["completion"].endswith(str(a * b))


# --- the HTTP protocol, against the reference server in a process of its own ---


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    with served_calculator() as url:
        yield url


def http(url: str, **fields: object) -> object:
    return make_environment(HttpSpec(url=url, backoff_s=0.05, **fields))


def test_an_episode_over_http(service: str) -> None:
    environment = http(service)
    row = {"prompt": "37*48=", "answer": "1776"}
    call, final = played(environment, row, "<calc>37*48</calc>", "1776")
    assert call.text == "<result>1776</result>" and call.tool_call and not call.done
    assert final.done and final.reward == 1.0 and final.components == {"correct": 1.0}
    episode = Episode(row=row)
    environment.reset(episode)
    episode.messages.append(("policy", "<calc>2*3</calc>"))
    first = environment.step(episode, "<calc>2*3</calc>")
    assert environment.step(episode, "<calc>2*3</calc>") == first  # a retried turn is answered as before
    verdict = environment.cut_off(episode, "max_turns")
    assert verdict.done and verdict.reward == 0.0 and "cut off by max_turns" in verdict.reason
    environment.close()


def test_http_errors_name_the_service_and_the_fix(service: str) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(EnvError, match=rf"127.0.0.1:{port}/reset failed 2 attempts .*grpo.environment.timeout_s"):
        http(f"http://127.0.0.1:{port}", attempts=2).reset(Episode(row={"prompt": "x"}))
    with pytest.raises(EnvError, match=r"unknown episode.*check grpo.environment.url"):
        unknown = Episode(row={"prompt": "x"}, state="never-reset", messages=[("policy", "1")])
        http(service).step(unknown, "1")


class Scripted(BaseHTTPRequestHandler):
    """Answers each POST with the next of `answers` (status, body)."""

    answers: list[tuple[int, str]] = []

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, body = type(self).answers.pop(0)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[tuple[str, type[Scripted]]]:
    handler = type("Handler", (Scripted,), {"answers": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "body, words",
    [
        ("[1, 2]", "it must answer a JSON object"),
        ('{"done": "yes"}', "\"done\": 'yes'; it must be true or false"),
        ('{"done": false}', "an episode that goes on needs a text"),
        ('{"done": true, "reward": "high"}', "\"reward\": 'high'; it must be a number"),
        ('{"done": true, "reward": 1, "components": {"a": "b"}}', "it must map names to numbers"),
        ("not json", "which is not JSON"),
    ],
)
def test_a_reply_that_breaks_the_protocol_is_named(scripted, body: str, words: str) -> None:
    url, handler = scripted
    handler.answers = [(200, body)]
    with pytest.raises(EnvError) as info:
        http(url).step(Episode(row={}, state="e", messages=[("policy", "hi")]), "hi")
    assert words in str(info.value) and url in str(info.value)


def test_a_services_reset_may_offer_tools(scripted) -> None:
    """The reset's answer may carry tools (JSON function schemas): the episode offers them (the rollout shows them);
    one that is no function schema is named."""
    url, handler = scripted
    tool = {"type": "function", "function": {"name": "search", "description": "the web", "parameters": {"type": "object"}}}
    handler.answers = [(200, json.dumps({"text": "Find it.", "tools": [tool]})), (200, json.dumps({"tools": [{"name": "x"}]}))]
    episode = Episode(row={"prompt": "?"})
    assert http(url).reset(episode) == "Find it." and episode.tools == [tool]
    with pytest.raises(EnvError, match=r'/reset answered tools\[0\] must be \{"type": "function"'):
        http(url).reset(Episode(row={"prompt": "?"}))


def test_busy_service_is_retried(scripted) -> None:
    url, handler = scripted
    handler.answers = [(503, "busy"), (429, "slow down"), (200, json.dumps({"text": "ok", "tool_call": True}))]
    reply = http(url, attempts=3).step(Episode(row={}, state="e", messages=[("policy", "hi")]), "hi")
    assert reply.text == "ok" and reply.tool_call and handler.answers == []


# --- python entrypoints: ours, OpenEnv's, and the allow-list ---


def test_python_entrypoints_must_be_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = PythonEnvironment(entrypoint="trainer_core.environments.calculator:Calculator")
    monkeypatch.delenv("RLPLANE_REWARD_ENTRYPOINTS", raising=False)
    with pytest.raises(EnvError, match="grpo.environment.entrypoint .* is not allowed by the server's RLPLANE_REWARD"):
        make_environment(spec)
    monkeypatch.setenv("RLPLANE_REWARD_ENTRYPOINTS", "trainer_core.environments.*:*")
    assert isinstance(make_environment(spec), Calculator)
    with pytest.raises(EnvError, match="made a SandboxLimits, which has no reset"):
        make_environment(PythonEnvironment(entrypoint="trainer_core.environments.sandbox:SandboxLimits"))


def test_an_openenv_environment_plays_through_the_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real openenv-core Environment (tests/harness/openenv_guess.py) made per episode: its reset's observation
    opens the episode, a bare message fills the action's one field, a bad one is answered with why, and the summed
    rewards end it."""
    monkeypatch.setenv("RLPLANE_REWARD_ENTRYPOINTS", "tests.harness.openenv_guess:*")
    environment = make_environment(PythonEnvironment(entrypoint="tests.harness.openenv_guess:make", stop=["\n"]))
    assert environment.stop == ("\n",)
    episode = Episode(row={"prompt": "guess", "seed": 7})
    assert environment.reset(episode) == "Guess a number from 1 to 10."
    replies = []
    for message in ("five", '{"guess": 3}', "9", "7"):
        episode.messages.append(("policy", message))
        replies.append(environment.step(episode, message))
    invalid, low, high, right = replies
    assert invalid.error and invalid.text.startswith("invalid action") and not invalid.done
    assert (low.text, high.text) == ("higher", "lower")
    assert right.done and right.reward == pytest.approx(0.7) and right.components == {"openenv": pytest.approx(0.7)}


def test_an_openenv_server_plays_its_episodes_in_sessions_of_their_own() -> None:
    """The same environment served by openenv-core's own server in another process (kind openenv): each episode is a
    WebSocket session of its own, so two played in turn keep their own targets; a bare message fills the Action's one
    field from the server's schema, one the server refuses is answered with its reason, the summed rewards end an
    episode, a cut-off one ends with the rewards so far, and close() ends the sessions left open. A URL where no
    server listens fails at once, naming the field."""
    with served_openenv(sessions=4) as url:
        environment = make_environment(OpenEnvEnvironment(url=url, stop=["\n"]))
        assert environment.stop == ("\n",) and environment.required == ["guess"]
        seven, two, left = Episode(row={"prompt": "guess", "seed": 7}), Episode(row={"seed": 2}), Episode(row={})
        assert [environment.reset(e) for e in (seven, two, left)] == ["Guess a number from 1 to 10."] * 3
        replies = [environment.step(seven, m) for m in ("five", '{"guess": 3}')]
        replies.append(environment.step(two, "2"))
        replies += [environment.step(seven, m) for m in ("9", "7")]
        invalid, low, two_right, high, right = replies
        assert invalid.error and not invalid.done and "guess: Input should be a valid integer" in invalid.text, invalid
        assert (low.text, high.text) == ("higher", "lower")
        assert two_right.done and two_right.reward == pytest.approx(0.9)
        assert right.done and right.reward == pytest.approx(0.7) and right.components == {"openenv": pytest.approx(0.7)}
        assert environment.step(left, "1").text == "higher"
        cut = environment.cut_off(left, "max_turns")
        assert cut.done and cut.reward == pytest.approx(-0.1) and cut.reason == "cut off by max_turns"
        abandoned = Episode(row={})
        environment.reset(abandoned)
        environment.close()
        assert abandoned.state.socket.state.name == "CLOSED"
        # a fifth live episode on a server of 4 sessions: refused, with the field that bounds the live episodes
        full = [Episode(row={}) for _ in range(4)]
        for episode in full:
            environment.reset(episode)
        with pytest.raises(EnvError, match=r"at capacity.*set grpo.environment.sessions to 4"):
            environment.reset(Episode(row={}))
        environment.close()
    with pytest.raises(EnvError, match=r"grpo.environment.url: .*/schema gave no Action schema"):
        make_environment(OpenEnvEnvironment(url=url))


@pytest.mark.parametrize("where", ["in process", "served"])
def test_an_openenv_mcp_environment_is_played_in_tool_call_tags(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An OpenEnv MCP environment (tests/harness/openenv_tools.py: FastMCP tools, the episode ends at `submit`), made
    per episode in process or served by openenv-core's own server with CallToolAction: its tools are offered on the
    episode after the reset, as JSON function schemas, and a turn stops at </tool_call>. A call in <tool_call> tags
    runs the tool and its result comes back in <tool_response> tags; a turn with no call, a call that is no JSON, an
    unknown tool and arguments the tool refuses are answered with why, as errors, and the episode goes on; submit
    ends it with the environment's reward."""
    calls = [
        "I think it is 42.",  # no call
        "<tool_call>{multiply: 3}</tool_call>",  # no JSON
        '<tool_call>{"name": "divide", "arguments": {"a": 1, "b": 2}}</tool_call>',  # no such tool
        '<tool_call>{"name": "multiply", "arguments": {"a": "x", "b": 4}}</tool_call>',  # the tool refuses it
        'Let me multiply.\n<tool_call>\n{"name": "multiply", "arguments": {"a": 13, "b": 17}}\n</tool_call>',
        '<tool_call>{"name": "submit", "arguments": {"answer": 221}}</tool_call>',
    ]
    row = {"prompt": "13*17=", "answer": "221"}
    if where == "in process":
        monkeypatch.setenv("RLPLANE_REWARD_ENTRYPOINTS", "tests.harness.openenv_tools:*")
        environment = make_environment(PythonEnvironment(entrypoint="tests.harness.openenv_tools:make", stop=["\n\n"]))
        opening, replies, tools = _opened_and_played(environment, row, calls)
        wrong = played(environment, row, '<tool_call>{"name": "submit", "arguments": {"answer": 220}}</tool_call>')
    else:
        with served_openenv(sessions=2, environment="tools") as url:
            environment = make_environment(OpenEnvEnvironment(url=url, stop=["\n\n"]))
            opening, replies, tools = _opened_and_played(environment, row, calls)
            wrong = played(environment, row, '<tool_call>{"name": "submit", "arguments": {"answer": 220}}</tool_call>')
    assert environment.stop == ("\n\n", "</tool_call>")
    assert opening == ""  # the reset's observation shows nothing; the rollout shows the tools (test_episodes.py)
    assert [t["function"]["name"] for t in tools] == ["multiply", "submit"] and {t["type"] for t in tools} == {"function"}
    assert tools[0]["function"]["parameters"]["required"] == ["a", "b"], tools
    no_call, no_json, unknown, refused, product, submitted = replies
    for reply, why in [
        (no_call, "invalid tool call: no tool call"),
        (no_json, "invalid tool call: the tool call is not JSON"),
        (unknown, "tool 'divide': Unknown tool: 'divide'"),
        (refused, "tool 'multiply': 1 validation error"),
    ]:
        assert reply.error and not reply.done and reply.reason.startswith(why), (reply, why)
        assert reply.text.startswith("<tool_response>\nerror: ") and reply.text.endswith("</tool_response>\n"), reply
    assert [r.tool_call for r in replies[:5]] == [False, False, True, True, True]
    assert product.text == "<tool_response>\n221\n</tool_response>\n" and not product.error and not product.done
    assert submitted.done and submitted.reward == 1.0 and submitted.components == {"openenv": 1.0}
    assert wrong[0].done and wrong[0].reward == 0.0


def _opened_and_played(environment, row: dict, messages: list[str]) -> tuple[str, list, list]:
    """The opening, the replies to `messages` and the tools the episode was offered."""
    episode = Episode(row=row)
    opening = environment.reset(episode)
    replies = []
    for message in messages:
        episode.messages.append(("policy", message))
        replies.append(environment.step(episode, message))
    return opening, replies, episode.tools


def test_tool_calls_read_string_arguments_and_mcp_results_of_every_content() -> None:
    """Arguments written as a JSON string (as some chat templates do) are read as the object; a result's text contents
    are joined and its other contents named by type; a result that is itself an error (is_error) is one; a call
    without a name, or with arguments that are no object, is refused with why."""
    call = '<tool_call>{"name": "multiply", "arguments": "{\\"a\\": 2, \\"b\\": 3}"}</tool_call>'
    assert tool_calls.read_call(call) == tool_calls.Call("multiply", {"a": 2, "b": 3})
    for bad, why in [
        ('<tool_call>{"arguments": {}}</tool_call>', 'needs a "name"'),
        ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "must be an object, not list"),
        ('<tool_call>{"name": "f"', "left open"),
    ]:
        with pytest.raises(ValueError, match=why):
            tool_calls.read_call(bad)
    contents = [{"type": "text", "text": "a page"}, {"type": "image", "data": "..."}, {"type": "text", "text": "more"}]
    assert replied({"tool_name": "look", "result": {"content": contents}}) == (
        "<tool_response>\na page\n[image]\nmore\n</tool_response>\n",
        None,
    )
    assert replied({"tool_name": "f", "result": {"content": [], "structured_content": {"x": 1}}})[0] == (
        '<tool_response>\n{"x": 1}\n</tool_response>\n'
    )
    failed = {"tool_name": "f", "result": {"content": [{"type": "text", "text": "disk full\nat line 3"}], "is_error": True}}
    assert replied(failed) == ("<tool_response>\ndisk full\nat line 3\n</tool_response>\n", "tool 'f': disk full")
