"""Every door has a lock (issue 31), tried with clients the project did not write: each mutating RPC of ingestion,
annotation, training, evaluation and the scorer called by a client built from server reflection alone, requests as
grpcurl's JSON, no deadline: without a token UNAUTHENTICATED, with a role that may not PERMISSION_DENIED naming the
role it needs (and nothing stored either way), with the right role it works. A forged annotator is refused, the
recorded actor and requester are the accounts, health stays open, a disabled account is refused at its next call,
no token reaches the log; and the HTTP APIs as plain urllib calls them (401, 403, 200). Then issue 36's table, one
test per row as the attacker tried it with each role's own token: an annotator bends no ranking (tasks bound to
assignments, one annotation per task, discards as votes), a judge speaks only for itself, an operator reaches no
host file and runs no code, a revocation outlives `cheems up`, weak tokens are refused, the CLI keeps the saved
token home, and the bus checks who publishes."""

from __future__ import annotations

import io
import json
import logging
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pool, json_format, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from sqlalchemy import Engine, func, select

from cheems.roles import ADMIN, ANNOTATOR, OPERATOR, SCORER_CLIENT, SERVICE
from evaluator.leaderboard.app import create_app as leaderboard
from evaluator.server import EvaluationServicer
from evaluator.server import host as evaluation_host
from services.annotation.exports import ExportConfig
from services.annotation.server import servicer_host as annotation_host
from services.annotation.service import AnnotationService
from services.annotation.web.app import create_app as annotation_page
from services.annotation.web.workbench import Workbench
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.hosting import GrpcHost, HostConfig
from services.ingestion.server import host as ingestion_host
from services.ingestion.service import IngestionService
from services.observe.logs import setup_logging
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from services.store.accounts import AccountBook, disable
from services.store.db import session_scope
from services.store.models import Annotator, Base, ModelTransition, Training
from services.web import HttpServer
from trainer.service.config import TrainingConfig
from trainer.service.launchers.local import LocalLauncher
from trainer.service.server import host as training_host
from trainer.service.trainings import TrainingService

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
ROLES = {
    "张三": ANNOTATOR,
    "mallory": ANNOTATOR,
    "ops": OPERATOR,
    "boss": ADMIN,
    "judge": SERVICE,
    "grpo": SCORER_CLIENT,
}


class Stranger:
    """A client from reflection alone: the services' names, request classes from JSON, no deadline."""

    def __init__(self, port: int) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(self.channel))

    def call(self, service: str, name: str, body: Any, token: str | None) -> tuple[grpc.StatusCode, str, dict]:
        method = self.pool.FindServiceByName(f"cheems.v1.{service}").methods_by_name[name]
        request_class = message_factory.GetMessageClass(method.input_type)
        reply_class = message_factory.GetMessageClass(method.output_type)
        kind = self.channel.stream_unary if method.client_streaming else self.channel.unary_unary
        rpc = kind(f"/cheems.v1.{service}/{name}", lambda m: m.SerializeToString(), reply_class.FromString)
        requests = [json_format.ParseDict(b, request_class()) for b in (body if method.client_streaming else [body])]
        metadata = [("authorization", f"Bearer {token}")] if token is not None else None
        try:
            reply = rpc(iter(requests) if method.client_streaming else requests[0], metadata=metadata)
        except grpc.RpcError as e:
            return e.code(), e.details() or "", {}
        return grpc.StatusCode.OK, "", json_format.MessageToDict(reply, preserving_proto_field_name=True)

    def healthy(self) -> bool:
        check = health_pb2_grpc.HealthStub(self.channel).Check(health_pb2.HealthCheckRequest(service=""))
        return check.status == health_pb2.HealthCheckResponse.SERVING


@dataclass
class System:
    engine: Engine
    clients: dict[str, Stranger]  # by gRPC service name
    tokens: dict[str, str]  # by account name
    checkpoint: Path

    def rows(self) -> dict[str, int]:
        with self.engine.connect() as connection:
            return {
                t.name: connection.scalar(select(func.count()).select_from(t)) or 0 for t in Base.metadata.sorted_tables
            }

    def code(self, who: str, service: str, method: str, body: Any) -> grpc.StatusCode:
        """The status of one call by `who`."""
        return self.clients[service].call(service, method, body, self.tokens[who])[0]

    def door(self, service: str, method: str, body: Any, right: str, wrong: str, needs: str) -> dict:
        """The three knocks: no token, `wrong`'s (PERMISSION_DENIED naming `needs`), `right`'s (the reply)."""
        client, before = self.clients[service], self.rows()
        code, details, _ = client.call(service, method, body, None)
        assert code == grpc.StatusCode.UNAUTHENTICATED, (method, code, details)
        code, details, _ = client.call(service, method, body, "not-a-token-of-anyone-0123")
        assert code == grpc.StatusCode.UNAUTHENTICATED, (method, code, details)
        code, details, _ = client.call(service, method, body, self.tokens[wrong])
        assert code == grpc.StatusCode.PERMISSION_DENIED, (method, code, details)
        assert f"needs the role {needs}; {wrong} is {ROLES[wrong]}" in details, details
        assert self.rows() == before, f"{method}: a refused call stored something"
        code, details, reply = client.call(service, method, body, self.tokens[right])
        assert code == grpc.StatusCode.OK, (method, code, details)
        return reply


def human(prompt: str, task: dict, annotation_id: str, reverse: bool = False, **more: Any) -> dict:
    """A human annotation of `task` (as ListTasks / CreateTasks return it): its responses in id order, or reversed."""
    order = {"groups": [{"ids": [k]} for k in sorted(task["response_ids"], reverse=reverse)]}
    body = {"annotation_id": annotation_id, "prompt_id": prompt, "task_id": task["task_id"], "order": order}
    return {**body, "kind": "ANNOTATOR_KIND_HUMAN", **more}


def serve(hosts: list[Any], host: GrpcHost) -> int:
    hosts.append(host.start())
    return host.port


@pytest.fixture
def system(
    engine: Engine, account: Callable[[str, str], str], tiny_checkpoint: Callable[..., Path], tmp_path: Path
) -> Iterator[System]:
    book, listen = AccountBook(engine), HostConfig(port=0, host="127.0.0.1")
    bench, exports = tmp_path / "bench", tmp_path / "exports"
    bench.mkdir()
    shutil.copy(SAMPLE / "open.jsonl", bench / "open.jsonl")
    hosts: list[GrpcHost] = []
    trainings = TrainingService(
        engine,
        TrainingConfig(
            data_dir=str(tmp_path / "data"), poll_seconds=0.3, model=str(tiny_checkpoint()), bench_root=str(bench)
        ),
        LocalLauncher(grace=2),
    )
    with EmbeddedBroker() as broker:
        broker.create_topics(["cheems.score-requests.v1"])
        publisher = Publisher(broker.bootstrap)
        scorer = ScorerServer(
            ScorerConfig(
                model=str(tiny_checkpoint()),
                backend="torch",
                host="127.0.0.1",
                grpc_port=0,
                http_port=-1,
                accounts=True,
                db=str(engine.url.render_as_string(hide_password=False)),
            )
        ).start()
        ports = {
            "IngestionService": serve(hosts, ingestion_host(IngestionService(engine), listen, book)),
            "AnnotationService": serve(
                hosts, annotation_host(AnnotationService(engine, exports=ExportConfig(str(exports))), listen, book)
            ),
            "TrainingService": serve(hosts, training_host(trainings, listen, book)),
            "EvaluationService": serve(
                hosts, evaluation_host(EvaluationServicer(engine, publisher, bench), listen, book)
            ),
            "RewardService": scorer.grpc_port,
        }
        clients = {name: Stranger(port) for name, port in ports.items()}
        try:
            yield System(engine, clients, {n: account(n, r) for n, r in ROLES.items()}, tiny_checkpoint())
        finally:
            for training in trainings.active():
                trainings.cancel_training(training.id)
            trainings.close()
            for host in hosts:
                host.stop(0)
            scorer.stop(grace=0)
            publisher.close()


@pytest.fixture
def debug_log() -> io.StringIO:
    """Every service's lines as a process writes them (services.observe.logs: JSON, debug level), for the test to
    read; the root logger as it was afterwards."""
    out = io.StringIO()
    setup_logging("test", log_format="json", level="DEBUG", stream=out)  # undone by tests/conftest.py
    return out


def read_log(out: io.StringIO, tokens: list[str]) -> list[dict[str, Any]]:
    """The JSON lines written, after checking that none holds a token (nor a token without its prefix)."""
    text = out.getvalue()
    assert not [t for t in tokens if t in text or t.removeprefix("chm_") in text], "a token reached the log"
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # PostgreSQL: the disabled-account test below
def test_every_mutating_rpc_is_locked_and_opens_to_its_role(
    system: System, caplog: pytest.LogCaptureFixture, debug_log: io.StringIO
) -> None:
    caplog.set_level(logging.DEBUG)  # every service's debug lines, each call with a token (right, wrong, none)
    s, both = system, "operator or admin"
    assert all(c.healthy() for c in s.clients.values())  # health needs no token
    sample = {
        "sample": {
            "prompt": "比较这五个回答",
            "responses": [{"id": f"r{i}", "content": f"第{i}个回答"} for i in range(1, 6)],
            "category": ["推理"],
        }
    }
    assert s.door("IngestionService", "Ingest", [sample], "ops", "张三", both)["stored"] == "1"  # int64 in JSON
    with session_scope(s.engine) as session:
        prompt = session.execute(select(Base.metadata.tables["prompts"].c.id)).scalar_one()
    tasks = s.door("AnnotationService", "CreateTasks", {"prompt_id": prompt, "group_size": 3}, "ops", "judge", both)[
        "tasks"
    ]
    anyone = "annotator, admin or service"
    assert len(tasks) > 2
    mine = s.clients["AnnotationService"].call("AnnotationService", "ListTasks", {}, s.tokens["张三"])[2]["tasks"]
    assert len(mine) == 1  # listing assigns: one triple of the prompt to 张三
    body = human(prompt, mine[0]["task"], "a0")
    assert s.door("AnnotationService", "SubmitAnnotation", body, "张三", "ops", anyone)["created"]
    other = next(t for t in tasks if t["task_id"] != mine[0]["task"]["task_id"])
    reassign = {"task_id": other["task_id"], "annotator": "mallory", "reason": "mallory knows the domain"}
    assert not s.door("AnnotationService", "ReassignTask", reassign, "ops", "张三", both).get("previous")  # nobody
    assert s.code("mallory", "AnnotationService", "SubmitAnnotation", human(prompt, other, "a1")) == grpc.StatusCode.OK
    void = {"annotation_id": "a1", "reason": "clicked through"}
    assert s.door("AnnotationService", "VoidAnnotation", void, "boss", "judge", both)["voided"]
    forged = {
        "annotation_id": "forged",
        "prompt_id": prompt,
        "annotator": "张三",
        "kind": "ANNOTATOR_KIND_HUMAN",
        "pair": {"a": "r1", "b": "r2", "verdict": "VERDICT_B_BETTER"},
    }
    for who in ("mallory", "boss", "judge"):  # another person, an admin, a service: none may speak for 张三
        assert s.code(who, "AnnotationService", "SubmitAnnotation", forged) == grpc.StatusCode.PERMISSION_DENIED
    ai = {**forged, "annotation_id": "ai", "annotator": "", "kind": "ANNOTATOR_KIND_AI", "task_id": other["task_id"]}
    assert s.code("judge", "AnnotationService", "SubmitAnnotation", ai) == grpc.StatusCode.PERMISSION_DENIED  # a triple
    pairs = s.door("AnnotationService", "CreateTasks", {"prompt_id": prompt, "group_size": 2}, "ops", "张三", both)
    ai["task_id"] = next(t["task_id"] for t in pairs["tasks"] if set(t["response_ids"]) == {"r1", "r2"})
    assert s.code("judge", "AnnotationService", "SubmitAnnotation", ai) == grpc.StatusCode.OK  # under its own name
    s.door("AnnotationService", "Resolve", {"prompt_id": prompt}, "ops", "张三", both)
    s.door(
        "AnnotationService",
        "Export",
        {"kind": "bench", "name": "x.jsonl"},
        "boss",
        "judge",
        both,
    )
    dataset = s.door("TrainingService", "CreateDataset", {"recipe": "human"}, "ops", "judge", both)["dataset_id"]
    training = s.door(
        "TrainingService",
        "StartTraining",
        {"dataset_id": dataset, "overrides": {"epochs": "1000"}},
        "ops",
        "grpo",
        both,
    )
    assert training["requested_by"] == "person:ops"
    s.door("TrainingService", "CancelTraining", {"training_id": training["training_id"]}, "ops", "张三", both)
    for model in ("rm-a", "rm-b"):
        register = {"path": str(s.checkpoint), "model_id": model, "actor": "person:someone-else"}
        assert s.door("TrainingService", "RegisterModel", register, "ops", "judge", both)["model_id"] == model
    s.door("TrainingService", "PromoteModel", {"model_id": "rm-a", "actor": "policy:auto"}, "boss", "ops", "admin")
    s.door("TrainingService", "PromoteModel", {"model_id": "rm-b"}, "boss", "ops", "admin")
    s.door("TrainingService", "RollbackModel", {"reason": "drift"}, "boss", "ops", "admin")
    s.door("TrainingService", "RejectModel", {"model_id": "rm-b", "reason": "long answers win"}, "ops", "grpo", both)
    run = {"bench_files": ["open.jsonl"], "scorer_url": "127.0.0.1:1"}
    assert s.door("EvaluationService", "StartRun", run, "ops", "judge", both)["run_id"]
    scored = s.door(
        "RewardService",
        "Score",
        {"prompt": "你好", "responses": ["你好！", "嗯"]},
        "grpo",
        "张三",
        "operator, admin, service or scorer-client",
    )
    assert len(scored["scores"]) == 2
    with session_scope(s.engine) as session:
        actors = {(t.model_id, t.action): t.actor for t in session.scalars(select(ModelTransition))}
        requested = session.scalars(select(Training.requested_by)).all()
    assert actors[("rm-a", "registered")] == "person:ops" and actors[("rm-a", "promoted")] == "person:boss"
    assert actors[("rm-a", "rolled_back")] == "person:boss" and actors[("rm-b", "rejected")] == "person:ops"
    assert requested == ["person:ops"]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "refused" in logged and not [t for t in s.tokens.values() if t in logged]
    records = read_log(debug_log, [*s.tokens.values(), "not-a-token-of-anyone-0123"])
    refused = {m[1] for r in records if (m := re.match(r"/cheems\.v1\.(\w+)/\w+ refused: ", r["message"]))}
    assert refused == set(s.clients), refused  # every service logged its refusals
    [scored] = [r for r in records if r["logger"] == "services.scorer.server" and r.get("request_id")]
    assert len(scored["request_id"]) == 32 and scored["total_ms"] >= scored["inference_ms"] >= 0  # one made up


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # SQLite: the test above (the lock's other half)
def test_a_disabled_account_is_refused_at_once(system: System) -> None:
    lookup = ("ops", "IngestionService", "GetSample", {"prompt_id": "nope"})
    assert system.code(*lookup) == grpc.StatusCode.NOT_FOUND
    with session_scope(system.engine) as session:
        disable(session, "ops")
    assert system.code(*lookup) == grpc.StatusCode.UNAUTHENTICATED
    assert system.code("ops", "RewardService", "GetModelInfo", {}) == grpc.StatusCode.UNAUTHENTICATED


def knock(url: str, token: str | None, body: Any = None) -> tuple[int, Any]:
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {token}"} if token else {})}
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_http_apis_as_plain_urllib_calls_them(
    engine: Engine, account: Callable[[str, str], str], debug_log: io.StringIO
) -> None:
    tokens = {n: account(n, r) for n, r in ROLES.items()}
    page = HttpServer(annotation_page(Workbench(AnnotationService(engine))), "127.0.0.1", 0).start()
    board = HttpServer(leaderboard(engine), "127.0.0.1", 0).start()
    try:
        me = f"http://127.0.0.1:{page.port}/api/me"
        assert knock(me, None)[0] == knock(me, "nope-0123456789")[0] == 401
        status, reply = knock(me, tokens["ops"])
        assert (status, reply["error"]) == (
            403,
            "the annotator's page needs the role annotator or admin; ops is operator",
        )
        assert knock(me, tokens["张三"]) == (200, {"name": "张三", "admin": False})
        assert knock(f"http://127.0.0.1:{page.port}/health", None)[0] == 200
        rollback = f"http://127.0.0.1:{board.port}/api/rollback"
        assert knock(rollback, None, {})[0] == 401
        status, reply = knock(rollback, tokens["ops"], {})
        assert (status, reply["reason"]) == (403, "forbidden") and "needs the role admin; ops is operator" in reply[
            "error"
        ]
        assert knock(rollback, tokens["boss"], {})[0] == 409  # past the lock: nothing to roll back to yet
    finally:
        page.stop()
        board.stop()
    read_log(debug_log, [*tokens.values(), "nope-0123456789"])


# Issue 36: each role can do its job and nothing more. One test per row of the table, each as the attacker
# tried it (the role's own token, the real services); each failed on the main of before.


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_an_annotator_bends_no_ranking_and_a_judge_speaks_only_for_itself(
    system: System, engine: Engine, account: Callable[[str, str], str]
) -> None:
    s, client = system, system.clients["AnnotationService"]
    responses = [{"id": f"r{i}", "content": f"第{i}个回答"} for i in range(1, 6)]
    sample = {"sample": {"prompt": "比较这五个回答", "responses": responses, "category": ["推理"]}}
    assert s.code("ops", "IngestionService", "Ingest", [sample]) == grpc.StatusCode.OK
    with session_scope(engine) as session:
        prompt = session.execute(select(Base.metadata.tables["prompts"].c.id)).scalar_one()
    tasks = client.call("AnnotationService", "CreateTasks", {"prompt_id": prompt}, s.tokens["ops"])[2]["tasks"]
    assert len(tasks) == 5

    def call(who: str, method: str, body: dict, token: str = "") -> tuple[grpc.StatusCode, str, dict]:
        return client.call("AnnotationService", method, body, token or s.tokens[who])

    def ranking() -> dict[str, int]:
        assert call("ops", "Resolve", {"prompt_id": prompt})[0] == grpc.StatusCode.OK
        return call("ops", "GetRanking", {"prompt_id": prompt})[2].get("rank", {})

    for n in range(3):  # three honest annotators rank their triples r1 > r2 > ... as listed
        token = account(f"q{n}", ANNOTATOR)
        [listed] = call("", "ListTasks", {}, token)[2]["tasks"]
        task = listed["task"]
        assert call("", "SubmitAnnotation", human(prompt, task, f"q{n}"), token)[0] == grpc.StatusCode.OK
    honest = ranking()
    assert len(set(honest.values())) > 1
    everything = [r["id"] for r in responses]
    # row 1: no task_id and `discarded` = every response wiped the prompt's ranking
    wipe = {**human(prompt, {"task_id": "", "response_ids": everything}, "m0"), "discarded": everything}
    code, details, _ = call("mallory", "SubmitAnnotation", wipe)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "task_id is required" in details, details
    # row 2: the reversed order five times without task_id made all ties; with her own task, one counts
    for n in range(5):
        reversed_ = human(prompt, {"task_id": "", "response_ids": everything}, f"m{n + 1}", reverse=True)
        assert call("mallory", "SubmitAnnotation", reversed_)[0] == grpc.StatusCode.INVALID_ARGUMENT
    [listed] = call("mallory", "ListTasks", {})[2]["tasks"]
    own = listed["task"]
    codes = [
        call("mallory", "SubmitAnnotation", human(prompt, own, f"o{n}", reverse=True, discarded=own["response_ids"]))[0]
        for n in range(5)
    ]
    assert codes == [grpc.StatusCode.OK] + [grpc.StatusCode.ALREADY_EXISTS] * 4, codes
    assert ranking() == honest  # her discards are her vote: the others' relations stand
    # row 3: a task the page gave 张三 completed over gRPC by mallory
    page = HttpServer(annotation_page(Workbench(AnnotationService(engine))), "127.0.0.1", 0).start()
    try:
        base = f"http://127.0.0.1:{page.port}"
        given = knock(f"{base}/api/tasks/next", s.tokens["张三"])[1]["task"]
        given["response_ids"] = [r["id"] for r in given["responses"]]
        taken = human(prompt, given, "steal")
        code, details, _ = call("mallory", "SubmitAnnotation", taken)
        assert code == grpc.StatusCode.PERMISSION_DENIED and "not assigned to mallory" in details, details
        body = {"annotation_id": "z1", "order": [[k] for k in given["response_ids"]]}
        url = f"{base}/api/tasks/{given['task_id']}/annotation"
        assert knock(url, s.tokens["张三"], body) == (200, {"created": True, "message": "submitted"})
    finally:
        page.stop()
    # row 4: the service account's AI annotation as "alice"; on a person's triple (张三's), or on no task
    pairs = call("ops", "CreateTasks", {"prompt_id": prompt, "group_size": 2})[2]["tasks"]
    pair = {"annotation_id": "ai-1", "prompt_id": prompt, "kind": "ANNOTATOR_KIND_AI"}
    for task_id, code in (
        (given["task_id"], grpc.StatusCode.PERMISSION_DENIED),
        ("", grpc.StatusCode.INVALID_ARGUMENT),
    ):
        verdict = {**pair, "task_id": task_id, "pair": {"a": "r1", "b": "r2", "verdict": "VERDICT_A_BETTER"}}
        assert call("judge", "SubmitAnnotation", verdict)[0] == code
    pair["task_id"] = next(t["task_id"] for t in pairs if set(t["response_ids"]) == {"r1", "r2"})
    pair["pair"] = {"a": "r1", "b": "r2", "verdict": "VERDICT_A_BETTER"}
    code, details, _ = call("judge", "SubmitAnnotation", {**pair, "annotator": "alice"})
    assert code == grpc.StatusCode.PERMISSION_DENIED and "in the name of 'alice'" in details, details
    assert call("judge", "SubmitAnnotation", pair)[0] == grpc.StatusCode.OK
    with session_scope(engine) as session:
        table = Base.metadata.tables["annotations"]
        stored = dict(session.execute(select(table.c.id, table.c.annotator)).all())
    assert stored["ai-1"] == "judge" and [a for a in stored.values() if a == "mallory"] == ["mallory"]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_an_operator_reaches_no_host_file_and_runs_no_code(system: System, tmp_path: Path) -> None:
    s, victim = system, tmp_path / "victim.sh"
    victim.write_text("echo mine\n")
    for body in (
        {"kind": "bench", "path": str(victim)},  # row 5: the file was replaced
        {"kind": "bench", "name": str(victim)},
        {"kind": "bench", "name": "../victim.sh"},
    ):
        code, details, _ = s.clients["AnnotationService"].call("AnnotationService", "Export", body, s.tokens["ops"])
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(("path:", "name:")), (body, details)
    assert victim.read_text() == "echo mine\n" and not [*(tmp_path / "exports").glob("*")]
    trojan = tmp_path / "trojan"  # row 6: a model folder whose remote code would run with trust_remote_code
    trojan.mkdir()
    (trojan / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "evil.Model"}}))
    (trojan / "evil.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w')\n")
    before = s.rows()
    for overrides, key in (
        ({"trust_remote_code": "true", "model": str(trojan)}, "model"),
        ({"trust_remote_code": "true"}, "trust_remote_code"),
        ({"out_dir": str(tmp_path)}, "out_dir"),
        ({"epochs": "1", "train_files": str(victim)}, "train_files"),
    ):
        body = {"dataset_id": "any", "overrides": overrides}
        code, details, _ = s.clients["TrainingService"].call("TrainingService", "StartTraining", body, s.tokens["boss"])
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (overrides, code, details)
        assert details.startswith(f"overrides: {key} is not a training knob"), details
    register = {"path": str(trojan), "model_id": "mine"}  # a model the scorer would load from the operator's folder
    code, details, _ = s.clients["TrainingService"].call("TrainingService", "RegisterModel", register, s.tokens["ops"])
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "outside the folders" in details, details
    assert s.rows() == before and not (tmp_path / "ran").exists()


def test_a_revocation_outlives_a_restart_of_cheems_up(tmp_path: Path) -> None:
    from services.store.accounts import reset_token
    from services.store.db import StoreConfig, create_engine_for
    from system.accounts import Revoked
    from system.plan import SystemConfig
    from system.up import prepare

    config = SystemConfig(data_dir=tmp_path / "up")
    prepare(config)
    kept = {name: (config.accounts / f"{name}.token").read_text() for name in ("operator", "eval-worker")}
    engine = create_engine_for(StoreConfig(config.database))
    book = AccountBook(engine)
    try:
        with session_scope(engine) as session:
            disable(session, "operator")  # row 7: re-enabled by the next `cheems up`
        with pytest.raises(Revoked, match=r"account 'operator' is disabled.*cheems accounts enable operator"):
            prepare(config)
        assert book(kept["operator"].strip()) is None
        with session_scope(engine) as session:
            session.get(Annotator, "operator").active = True  # type: ignore[union-attr]
            reset_token(session, "eval-worker")  # row 7: its old token was restored
        with pytest.raises(Revoked, match="account 'eval-worker' has another token than its file"):
            prepare(config)
        assert book(kept["eval-worker"].strip()) is None
        assert {n: (config.accounts / f"{n}.token").read_text() for n in kept} == kept  # nothing rewritten
    finally:
        engine.dispose()


def test_a_weak_token_is_refused_wherever_it_is_given(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cheems_cli.main import app
    from services.store.migrate import upgrade

    db, weak = f"sqlite:///{tmp_path / 'cheems.db'}", tmp_path / "weak.token"
    upgrade(db)
    weak.write_text("a" * 16 + "\n")  # row 9: accepted
    for command in (["accounts", "add", "etl", "--role", "operator", "--db", db], ["serve", "--model", str(tmp_path)]):
        result = CliRunner().invoke(app, [*command, "--token-file", str(weak)])
        said = " ".join(result.output.translate(str.maketrans("│╭╮╰╯─", "      ")).split())  # rich's box unwrapped
        assert result.exit_code == 2 and "a" * 16 not in said, said
        assert "--token-file" in said and "fewer than 8 different characters" in said, said
    for token in ("a" * 16, "abcdefgh", "0123456789abcdef"):  # the scorer's static token: no minimum before
        with pytest.raises(ValueError, match="token"):
            ScorerConfig(model=str(tmp_path), token=token)
    assert "etl" not in CliRunner().invoke(app, ["accounts", "list", "--db", db]).output


def test_the_cli_sends_the_saved_operator_token_to_no_other_listener(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from typer.testing import CliRunner

    from cheems_cli.main import app
    from tests.services.accounts import Recorder

    for name in ("CHEEMS_TOKEN", "CHEEMS_TOKEN_FILE", "CHEEMS_SCORER_TOKEN", "CHEEMS_SCORER_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    saved = "chm_" + "Xq7Lm2Vb9Tz4Rk8Wn3Pd6Hs1Yf5Ja8Qc2Gu7Ne4"
    accounts = tmp_path / "out" / "up" / "accounts"
    accounts.mkdir(parents=True)
    (accounts / "operator.token").write_text(saved + "\n")
    (accounts / "operator.addresses").write_text("127.0.0.1:50051\n")  # where `cheems up` listens
    recorder = Recorder()
    stranger = grpc.server(ThreadPoolExecutor(2), handlers=[recorder])
    port = stranger.add_insecure_port("127.0.0.1:0")
    stranger.start()
    try:  # row 10: the operator's token was sent to any port given
        args = ["score", "--prompt", "你好", "--response", "好", "--model-url", f"127.0.0.1:{port}"]
        result = CliRunner().invoke(app, args)
    finally:
        stranger.stop(None)
    assert recorder.seen and recorder.authorizations() == [], result.output
    assert f"no token sent to 127.0.0.1:{port}" in result.output and saved not in result.output


def test_the_bus_checks_who_publishes_and_reads() -> None:
    from cheems.errors import ConfigError
    from tests.k8s.manifests import by_kind, render
    from tests.k8s.test_kafka_users import acls_of

    # row 8: with no credential, anyone could publish samples and read every annotation
    for host in ("0.0.0.0", "::", "10.1.2.3"):  # the embedded broker authenticates no one: loopback only
        with pytest.raises(ConfigError, match="no authentication and listens on loopback only"):
            EmbeddedBroker(host=host)
    docs = render("overlays/prod")
    [kafka] = by_kind(docs, "Kafka").values()
    listeners = kafka["spec"]["kafka"]["listeners"]
    assert listeners and all(x["tls"] and x["authentication"]["type"] == "scram-sha-512" for x in listeners)
    assert kafka["spec"]["kafka"]["authorization"]["type"] == "simple"
    users = {name: acls_of(user) for name, user in by_kind(docs, "KafkaUser").items()}
    assert {u for u, acls in users.items() if ("topic", "cheems.samples.v1", "Write") in acls} == {"cheems-ingestion"}
    assert not [u for u, acls in users.items() if ("topic", "cheems.annotations.v1", "Read") in acls]  # none reads
    readers = {u for u, acls in users.items() if ("topic", "cheems.samples.v1", "Read") in acls}
    assert readers == {"cheems-annotation"}  # the AI judge reads nothing of Kafka: it calls the annotation service
