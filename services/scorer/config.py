"""The scorer's one configuration object: every limit, default and knob of `cheems serve`.

Each knob is declared once, here: type, default, validation and description. `cheems serve` makes
its options from these fields (`--max-length` is `max_length`, its help is the description), and
every field can come from the environment as `CHEEMS_SCORER_<FIELD>`:

    CHEEMS_SCORER_TOKEN=s3cret CHEEMS_SCORER_MAX_LENGTH=4096 cheems serve --model out/train-tiny/model

`--follow` reads its broker and store from the shared settings when not given (`CHEEMS_KAFKA_BOOTSTRAP`,
`CHEEMS_DATABASE_URL`). Keyword arguments (the command line's options) win over the environment, which wins
over the default.
Code that builds one directly, `ScorerConfig(model=..., grpc_port=0)`, reads the environment too.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cheems.attention import AttentionName
from cheems.chat import Truncation
from cheems.credentials import check_strength, read_secret
from cheems.precision import DtypeName
from cheems.settings import setting

ENV_PREFIX = "CHEEMS_SCORER_"
MIB = 1024 * 1024


class ScorerConfig(BaseSettings):
    """What `cheems serve` serves, where, and within which limits."""

    # extra="forbid": a misspelled keyword fails; stray CHEEMS_SCORER_* variables (CHEEMS_SCORER_URL
    # is the clients' setting) are not fields, and pydantic-settings ignores them.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    model: str = Field(
        default="",
        description="Checkpoint directory (AutoModelForSequenceClassification, safetensors), or a Hugging Face Hub "
        "id, org/name or org/name@revision, fetched into huggingface_hub's cache (HF_HOME, HF_HUB_OFFLINE, HF_TOKEN).",
    )
    model_id: str = Field(
        default="",
        description="Id reported in replies and GetModelInfo; empty = the checkpoint directory's (or Hub "
        "repository's) name.",
    )
    follow: bool = Field(
        default=False,
        description="Follow the registry: the default model is its production model (switched on each "
        "promotion); calls may name any registered model.",
    )
    bootstrap: str = Field(
        default="",
        validate_default=True,  # to fill it from the settings
        description="Kafka bootstrap servers of --follow; empty = CHEEMS_KAFKA_BOOTSTRAP.",
    )
    db: str = Field(
        default="",
        repr=False,  # a URL may hold a password
        validate_default=True,
        description="Store URL: the registry --follow reads (production, the models calls name, and what each models "
        "event claims), and where the reward watch finds each model's CheemsBench rewards; empty = CHEEMS_DATABASE_URL "
        "with --follow or --accounts, else none.",
    )
    backend: Literal["triton", "torch", "vllm"] = Field(
        default="triton",
        description="triton (started by PyTriton, or external with --triton-url), torch (in-process) or vllm (an "
        "engine started with --vllm-python, or external with --vllm-url; tensor parallel, prefix caching).",
    )
    host: str = Field(
        default="127.0.0.1", description="Address to listen on: 127.0.0.1 = this machine only; 0.0.0.0 in a pod."
    )
    # The two ports equal services.hosting.SCORER_GRPC_PORT / SCORER_HTTP_PORT (tests/k8s checks it);
    # not imported from there, as that would load grpc for every `cheems --help`.
    grpc_port: int = Field(default=50051, ge=0, le=65535, description="gRPC port (0 = any free port).")
    http_port: int = Field(
        default=8000, ge=-1, le=65535, description="HTTP port (0 = any free port, -1 = no HTTP server)."
    )
    triton_url: str = Field(
        default="", description="host:port of an external Triton gRPC endpoint; empty = start one with PyTriton."
    )
    triton_model_name: str = Field(default="cheems_rm", description="Name of the model in Triton.")
    vllm_url: str = Field(
        default="",
        description="host:port of a running vLLM pooling server (docs/serving.md, the vLLM backend); empty = start "
        "one per model with --vllm-python.",
    )
    vllm_python: str = Field(
        default="",
        description="Python of the environment that has vLLM; empty = .venv-vllm/bin/python (make setup-vllm).",
    )
    vllm_model_name: str = Field(
        default="", description="Name of the model in the vLLM server at --vllm-url; empty = the first it lists."
    )
    vllm_api_key_file: str = Field(
        default="",
        description="A file holding the API key of the vLLM server at --vllm-url (sent as a bearer token on every "
        "call; a key it refuses stops the start). An engine the scorer starts gets a new key of its own each start.",
    )
    tensor_parallel_size: int = Field(
        default=1,
        ge=1,
        description="GPUs (CPU: groups of cores) one vLLM engine spreads the model over (72B bf16: 4 x 80 GB).",
    )
    max_model_len: int = Field(default=0, ge=0, description="Longest sequence a vLLM engine takes; 0 = --max-length.")
    vllm_memory_fraction: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Share of the GPU's memory a vLLM engine takes for weights and cache (its "
        "--gpu-memory-utilization); on the CPU build, the share of this host's available memory, less the weights, "
        "its KV caches take, divided among its tensor-parallel workers; 0 = 0.9 on a GPU, 0.5 on the CPU. "
        "Two engines on one GPU (a promotion, --max-models) need shares that sum below 1.",
    )
    vllm_quick_start: bool = Field(
        default=False,
        description="Start vLLM engines without compiling or CUDA graphs, in one process at tensor parallel 1: ready "
        "in about a third of the time, slower to serve (tests, trying it out).",
    )
    vllm_start_seconds: float = Field(
        default=900.0, gt=0, description="How long a vLLM engine may take to load its model and answer /health."
    )
    dtype: DtypeName = Field(
        default="auto",
        description="What the model computes in: auto = bfloat16 on a CUDA device that has it (float16 on older "
        "cards), float32 on CPU. Rewards are float32 whatever it is; a dtype the device cannot run is refused.",
    )
    attn_implementation: AttentionName = Field(
        default="auto",
        description="The attention kernel: auto = flex_attention on a CUDA device (packed rows skip the blocks nobody "
        "sees), sdpa on CPU; flash_attention_2 needs the flash_attn package and packs nothing. One the device cannot "
        "run is refused.",
    )
    max_batch_size: int = Field(
        default=64,
        ge=1,
        description="Responses per forward: concurrent calls share a forward up to this (torch: the scorer's "
        "batcher; triton: its dynamic batcher); larger calls are split into forwards of this.",
    )
    max_batch_tokens: int = Field(
        default=32768,
        ge=1,
        description="Tokens per forward, padding counted (both backends): what fills a card without overflowing it.",
    )
    queue_delay_us: int = Field(
        default=2000,
        ge=0,
        description="Microseconds a call may wait for others to share its forward (torch: only while other calls "
        "are still being tokenized; triton: its dynamic batcher's delay).",
    )
    prefix_sharing: bool = Field(
        default=True,
        description="on: responses to one prompt go in one packed row that computes their common prefix once "
        "(rewards unchanged); off: each sequence on its own.",
        json_schema_extra={"cli": "on|off"},  # `--prefix-sharing on|off`, not a --flag/--no-flag pair
    )
    max_models: int = Field(
        default=3,
        ge=1,
        description="Models held at once (the default one counted): with --follow, a model a call names by id or "
        "alias is loaded on its first call; past this the least recently used idle one is unloaded.",
    )
    max_responses: int = Field(default=64, ge=1, description="Responses per Score call (per ScoreBatch item).")
    max_batch_items: int = Field(default=128, ge=1, description="Items per ScoreBatch call.")
    max_queries: int = Field(
        default=4096, ge=1, description="Queries per HTTP /get_reward call (OpenRLHF rollout batches)."
    )
    max_length: int = Field(default=2048, ge=1, description="Tokens per (prompt, response).")
    truncation: Literal["error", "left", "right"] = Field(
        default="error", description="An over-length input: error rejects it; left or right cuts it and flags it."
    )
    max_message_bytes: int = Field(
        # gRPC hands a received message to Python as one bytes copy with the GIL held (~35 ms for 50 MB,
        # measured): every other call waits it out. Over this limit gRPC refuses at the message's header.
        default=16 * MIB,
        ge=1024,
        description="Largest request in bytes: gRPC message and HTTP body alike (refused before it is read).",
    )
    max_call_seconds: float = Field(
        default=300.0, gt=0, description="Limit per call; calls without a deadline (grpcurl, Go stubs) get this one."
    )
    max_connection_age: float = Field(
        default=300.0,
        gt=0,
        description="Seconds a client's gRPC connection lasts before the scorer asks it to reconnect, so clients "
        "behind a ClusterIP Service spread over replicas added since.",
    )
    max_connection_age_grace: float = Field(
        default=300.0, ge=0, description="Seconds the calls in flight on an aged connection get to finish."
    )
    token: str = Field(
        default="",
        repr=False,  # never in logs
        description="Require this bearer token: `authorization: Bearer TOKEN` (HTTP also takes ?token=); 128 bits at "
        "least (`openssl rand -hex 32`).",
    )
    token_file: str = Field(
        default="",
        description="Read --token from this file instead: an option shows in `ps` (the variable does not).",
    )
    accounts: bool = Field(
        default=False,
        description="Also take the bearer tokens of the store's accounts allowed to score (scorer-client, service, "
        "operator, admin; --db, else CHEEMS_DATABASE_URL): every call then needs a credential, --token or not.",
    )
    tls_cert: str = Field(default="", description="PEM certificate for TLS on the gRPC port (with --tls-key).")
    tls_key: str = Field(default="", description="PEM private key of --tls-cert.")
    drain_seconds: float = Field(default=10.0, ge=0, description="Grace for in-flight calls on SIGTERM.")
    triton_restarts: int = Field(
        default=3,
        ge=0,
        description="Restarts of a crashed Triton (PyTriton-started) or vLLM engine (this scorer's) before giving up "
        "(exit 1, liveness fails).",
    )
    watch_seconds: float = Field(
        default=0.5, gt=0, description="How often the backend's health is checked, in seconds."
    )
    metrics: bool = Field(
        default=True,
        description="Count calls, phases, tokens and rewards for /metrics (off: nothing counted, /metrics answers 404; "
        "what bench/scorer_bench.py --metrics-only compares with).",
    )
    reward_window: int = Field(
        default=1024,
        ge=2,
        description="Rewards the reward watch's rolling mean, std and length correlation are over, per model.",
    )
    device: str = Field(default="cpu", description="Torch device of the model: cpu, cuda, cuda:1 ...")
    workers: int = Field(default=16, ge=1, description="gRPC handler threads.")

    @field_validator("tls_key")
    @classmethod
    def _tls_pair(cls, tls_key: str, info: ValidationInfo) -> str:
        # tls_cert is declared first, so it is validated and in info.data by now
        if bool(tls_key) != bool(info.data.get("tls_cert")):
            raise ValueError("tls_cert and tls_key must be given together")
        return tls_key

    @field_validator("token")
    @classmethod
    def _strong(cls, token: str) -> str:
        return check_strength(token) if token else token  # 128 bits at least (cheems.credentials)

    @field_validator("token_file")
    @classmethod
    def _readable(cls, token_file: str) -> str:
        if token_file:
            check_strength(read_secret(token_file))  # here, so that an error names --token-file
        return token_file

    @model_validator(mode="after")
    def _token_from_file(self) -> ScorerConfig:
        if self.token_file:  # the file wins over --token and CHEEMS_SCORER_TOKEN
            self.token = read_secret(self.token_file)
        if self.accounts and not self.db:  # the store whose accounts are taken
            self.db = setting("database_url")
        return self

    @field_validator("bootstrap")
    @classmethod
    def _broker_to_follow(cls, bootstrap: str, info: ValidationInfo) -> str:
        # follow is declared first, so it is in info.data by now (as model is, for db)
        if info.data.get("follow") and not (bootstrap := bootstrap or setting("kafka_bootstrap")):
            raise ValueError("--follow needs a Kafka broker: give it here or set CHEEMS_KAFKA_BOOTSTRAP")
        return bootstrap

    @field_validator("db")
    @classmethod
    def _registry_to_start_from(cls, db: str, info: ValidationInfo) -> str:
        # --follow reads the registry even with --model: an event on the models topic is checked there
        if info.data.get("follow"):
            return db or setting("database_url")
        return db

    @field_validator("triton_url")
    @classmethod
    def _not_followed(cls, triton_url: str, info: ValidationInfo) -> str:
        if triton_url and info.data.get("follow"):
            raise ValueError("--follow loads each model itself, so not into an external Triton")
        return triton_url

    @field_validator("vllm_url")
    @classmethod
    def _vllm_not_followed(cls, vllm_url: str, info: ValidationInfo) -> str:
        if vllm_url and info.data.get("follow"):
            raise ValueError("--follow starts an engine for each model itself, so not with --vllm-url")
        if vllm_url:
            from services.scorer.vllm.client import host_port

            host_port(vllm_url)
        return vllm_url

    @field_validator("vllm_api_key_file")
    @classmethod
    def _key_of_an_external_engine(cls, vllm_api_key_file: str, info: ValidationInfo) -> str:
        if vllm_api_key_file and not info.data.get("vllm_url"):
            raise ValueError("is the key of the vLLM server at --vllm-url; an engine the scorer starts gets its own")
        if vllm_api_key_file:
            read_secret(vllm_api_key_file)  # here, so that an error names --vllm-api-key-file
        return vllm_api_key_file

    @property
    def truncation_policy(self) -> Truncation:
        return Truncation.NONE if self.truncation == "error" else Truncation(self.truncation)
