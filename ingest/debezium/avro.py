"""Debezium change events written by an Avro converter: the Confluent wire format, decoded by
each message's schema id into the JSON converter's form, then decoded as JSON events are.

Kafka Connect's Avro converters (Confluent's ``AvroConverter``, Apicurio's with
``apicurio.registry.as-confluent=true`` and ``apicurio.registry.headers.enabled=false``) frame
every key and value as documented for Confluent's Schema Registry: byte 0 is the magic byte
``0``, bytes 1-4 the schema id (big-endian), the rest the Avro binary encoding of the record
under that schema. The schema is fetched once per id from the registry (confluent-kafka's
``SchemaRegistryClient``, which also handles authentication and its own cache) and kept for the
life of the worker process: a registry never changes the schema behind an id.

Why transcode instead of decoding Avro straight into columns: everything after the envelope -
routing, op handling, keys, ordering, the logical types of :mod:`ingest.debezium.layout`,
schema unification and table evolution - already exists for the JSON converter's form
``{"schema": <connect schema>, "payload": <envelope>}``. Each Avro schema is translated once
into the Connect schema that ``AvroData`` derived it from (the ``connect.*`` properties it
writes keep the logical names, the int8/int16 types and the decimal parameters), serialised
once, and each message's payload is written next to it. Identical schema bytes per id let the
JSON decoder's fast path (:mod:`ingest.debezium.fastpath`) take the messages, and a new schema
id after ``ALTER TABLE`` is a new row schema there, evolving the table exactly as JSON does.

Values are read with the schema's ``logicalType`` attributes removed, so that fastavro hands over
what the JSON converter writes (days, epoch units, the decimal's unscaled bytes) rather than
``Decimal``/``datetime`` objects that would have to be turned back; bytes become base64 text and
non-finite floats the strings Jackson writes, as in JSON.

Bad messages are dead letters with the original bytes: a value that is not in the wire format
(:attr:`DeadLetterReason.BAD_WIRE_FORMAT`), an id the registry does not know
(:attr:`~DeadLetterReason.UNKNOWN_SCHEMA_ID`), an encoding that does not match its schema
(:attr:`~DeadLetterReason.MALFORMED_AVRO`), a schema with no Connect form
(:attr:`~DeadLetterReason.UNSUPPORTED_SCHEMA`). A registry that cannot be reached (or refuses
the credentials) is no property of a message: :class:`SchemaRegistryUnavailable` fails the task,
and the batch is retried rather than dead-lettered.

Keys are Avro when framed so (magic byte 0), else left as they are (a JSON key never starts with
a zero byte); they are transcoded only when the decoder reads them (deletes, key learning).
"""

from __future__ import annotations

import base64
import io
import math
import struct
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import orjson

from ingest.debezium.errors import DeadLetterReason, DebeziumError, DecoderConfigError
from ingest.debezium.model import DeadLetter, DecodedBatch, RecordChunk
from ingest.debezium.topics import route_topic

if TYPE_CHECKING:
    from ingest.debezium.decoder import RecordHold
    from ingest.debezium.model import DecoderConfig

__all__ = [
    "MAGIC_BYTE",
    "AvroDecoding",
    "AvroMessageError",
    "CompiledSchema",
    "SchemaRegistryUnavailable",
    "SchemaSource",
    "UnknownSchema",
    "compile_schema",
    "decode_avro_chunks",
    "frame",
    "schema_id",
]

#: The first byte of Confluent's wire format (version 0: a 4-byte schema id follows).
MAGIC_BYTE = 0
_HEADER = struct.Struct(">bI")
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


# -- errors --------------------------------------------------------------------------------------


class AvroMessageError(DebeziumError):
    """One message (or one schema id) cannot be decoded; the ``reason`` of its dead letter."""

    def __init__(self, reason: DeadLetterReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class UnknownSchema(AvroMessageError):
    """The registry answered that it has no schema of this id (HTTP 404)."""

    def __init__(self, schema_id: int, detail: str) -> None:
        super().__init__(
            DeadLetterReason.UNKNOWN_SCHEMA_ID,
            f"the schema registry has no schema with id {schema_id}: {detail}",
        )
        self.schema_id = schema_id


class SchemaRegistryUnavailable(DebeziumError):
    """The registry could not be asked (down, refusing the credentials, answering 5xx): the
    task fails and its batch is retried; no message is dead-lettered for it.

    ``registry`` is the URL without its user information: never a secret."""

    def __init__(
        self, registry: str, schema_id: int, detail: str, status: int | None = None
    ) -> None:
        shown = f" (HTTP {status})" if status is not None else ""
        super().__init__(
            f"schema registry {registry} did not give schema {schema_id}{shown}: {detail}"
        )
        self.registry = registry
        self.schema_id = schema_id
        self.status = status


# -- the wire format -----------------------------------------------------------------------------


def schema_id(message: bytes) -> int:
    """The schema id of a message in Confluent's wire format; raises :class:`AvroMessageError`
    (``bad_wire_format``) for anything else."""
    if len(message) < _HEADER.size:
        raise AvroMessageError(
            DeadLetterReason.BAD_WIRE_FORMAT,
            f"{len(message)} bytes: too short for the Confluent wire format (magic byte 0 and "
            "a 4-byte schema id)",
        )
    magic, found = _HEADER.unpack_from(message)
    if magic != MAGIC_BYTE:
        raise AvroMessageError(
            DeadLetterReason.BAD_WIRE_FORMAT,
            f"magic byte {magic & 0xFF:#04x}, not {MAGIC_BYTE:#04x}: not a message of an Avro "
            "converter writing the Confluent wire format",
        )
    return int(found)


def frame(schema_id: int, body: bytes) -> bytes:
    """``body`` (Avro binary) framed with ``schema_id`` as Confluent's serializers write it."""
    return _HEADER.pack(MAGIC_BYTE, schema_id) + body


# -- where schemas come from ---------------------------------------------------------------------


class SchemaSource(Protocol):
    """The Avro schema (its JSON text) registered under an id.

    Raises :class:`UnknownSchema` when the registry has none, :class:`SchemaRegistryUnavailable`
    when it cannot say, :class:`AvroMessageError` when the schema is not Avro."""

    def schema_text(self, schema_id: int) -> str: ...


@dataclass(frozen=True, repr=False)
class AvroDecoding:
    """Where a job's Avro-encoded topics find their schemas (``source.converter: avro``).

    ``registry_options`` are confluent-kafka ``SchemaRegistryClient`` settings besides ``url``
    (``basic.auth.user.info``, ``bearer.auth.*``, ``ssl.*``); they may hold secrets, so they
    never appear in a repr (nor does the user information a URL may hold). The class pickles
    to Spark's executors, which build their client from it (one per worker process)."""

    registry_url: str
    registry_options: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.registry_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise DecoderConfigError(
                f"schema registry url must be http(s)://host[:port][/path], not {self.shown_url!r}"
            )
        object.__setattr__(
            self, "registry_options", tuple(sorted(dict(self.registry_options).items()))
        )
        if "url" in dict(self.registry_options):
            raise DecoderConfigError("give the schema registry's url as its url, not an option")

    def __repr__(self) -> str:
        """The URL without user information, the options' names without their values."""
        names = [k for k, _ in self.registry_options]
        return f"AvroDecoding(registry={self.shown_url!r}, options={names!r})"

    @classmethod
    def of(cls, url: str, options: Mapping[str, str] | None = None) -> AvroDecoding:
        return cls(url, tuple((options or {}).items()))

    @property
    def shown_url(self) -> str:
        """The URL without user information (``http://user:pass@host`` is a valid form)."""
        parts = urlsplit(self.registry_url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"

    def client_config(self) -> dict[str, object]:
        """The client's settings; numbers given as text (YAML, environment) become numbers,
        which the client requires for them."""
        config: dict[str, object] = {"url": self.registry_url}
        for key, text in self.registry_options:
            config[key] = _number(key, text) if key in _NUMERIC_OPTIONS else text
        return config

    def check(self) -> None:
        """Build a client once (no request is made): confluent-kafka refuses unknown options
        here, so a misspelt key fails at configuration time, not in the first task."""
        try:
            import fastavro  # noqa: F401 - present, or the tasks would fail on the first message
            from confluent_kafka.schema_registry import SchemaRegistryClient
        except ImportError as exc:
            raise DecoderConfigError(
                f"source.converter: avro needs confluent-kafka[avro] ({exc}): install "
                "lakestream[spark]"
            ) from None
        try:
            SchemaRegistryClient(self.client_config())
        except (ValueError, TypeError) as exc:
            raise DecoderConfigError(f"schema registry options: {exc}") from None

    def source(self) -> RegistrySchemas:
        """This process's client of the registry (schemas are cached in it for good)."""
        found = _SOURCES.get(self)
        if found is None:
            found = _SOURCES[self] = RegistrySchemas(self)
        return found


#: SchemaRegistryClient settings it wants as numbers.
_NUMERIC_OPTIONS = frozenset({
    "timeout", "cache.capacity", "cache.latest.ttl.sec", "max.retries", "retries.wait.ms",
    "retries.max.wait.ms",
})  # fmt: skip


def _number(key: str, text: str) -> float | int:
    try:
        number = float(text)
    except ValueError:
        raise DecoderConfigError(f"schema registry option {key} must be a number") from None
    return int(number) if number.is_integer() else number


class RegistrySchemas:
    """Schemas by id from a Confluent-compatible registry (Confluent, Apicurio's ``ccompat``,
    Karapace), through confluent-kafka's client."""

    def __init__(self, decoding: AvroDecoding) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.registry = decoding.shown_url
        self._client = SchemaRegistryClient(decoding.client_config())
        self.compiled: dict[int, CompiledSchema | AvroMessageError] = {}

    def schema_text(self, schema_id: int) -> str:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            schema = self._client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise UnknownSchema(schema_id, exc.error_message) from None
            raise SchemaRegistryUnavailable(
                self.registry, schema_id, exc.error_message, exc.http_status_code
            ) from exc
        except Exception as exc:  # the HTTP client's own errors (connect, TLS, timeout)
            raise SchemaRegistryUnavailable(self.registry, schema_id, repr(exc)) from exc
        kind = schema.schema_type or "AVRO"
        if kind != "AVRO":
            raise AvroMessageError(
                DeadLetterReason.UNSUPPORTED_SCHEMA,
                f"schema {schema_id} is {kind}, not AVRO: only the Avro converter is read",
            )
        if schema.references:
            raise AvroMessageError(
                DeadLetterReason.UNSUPPORTED_SCHEMA,
                f"schema {schema_id} has references, which the decoder does not resolve",
            )
        text = schema.schema_str
        if not isinstance(text, str):
            raise UnknownSchema(schema_id, "the registry's answer holds no schema text")
        return text


#: Per worker process: a registry client per configuration (schemas are cached in it).
_SOURCES: dict[AvroDecoding, RegistrySchemas] = {}


# -- Avro schema -> Connect schema ---------------------------------------------------------------

Convert = Callable[[Any], Any]

_PRIMITIVE_TYPES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
#: Avro logical types (when no ``connect.name`` says more) -> the Connect/Debezium logical name.
_LOGICAL_NAMES = {
    "decimal": "org.apache.kafka.connect.data.Decimal",
    "date": "org.apache.kafka.connect.data.Date",
    "time-millis": "org.apache.kafka.connect.data.Time",
    "timestamp-millis": "org.apache.kafka.connect.data.Timestamp",
    "time-micros": "io.debezium.time.MicroTime",
    "timestamp-micros": "io.debezium.time.MicroTimestamp",
    "local-timestamp-millis": "io.debezium.time.Timestamp",
    "local-timestamp-micros": "io.debezium.time.MicroTimestamp",
    "uuid": "io.debezium.data.Uuid",
}
_CONNECT_INT_TYPES = {"int8", "int16", "int32"}
_MAP_ENTRY = "MapEntry"


def _base64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _float(value: float) -> float | str:
    """Jackson writes non-finite doubles as these strings; the float codec reads them."""
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else _NON_FINITE[value]


class UnsupportedAvro(AvroMessageError):
    def __init__(self, message: str) -> None:
        super().__init__(DeadLetterReason.UNSUPPORTED_SCHEMA, message)


@dataclass(frozen=True)
class CompiledSchema:
    """One schema id, ready to decode: the fastavro schema (logical types removed), the Connect
    schema the JSON decoder reads (serialised once), and the conversion of decoded values to
    the JSON converter's form (``None`` when fastavro's output is that form already)."""

    schema_id: int
    avro: Any
    connect: Mapping[str, object]
    convert: Convert | None

    @cached_property
    def connect_json(self) -> bytes:
        return orjson.dumps(self.connect)

    def read(self, body: bytes | memoryview) -> object:
        """The record encoded in ``body`` (the message less its header), in JSON form."""
        import fastavro

        stream = io.BytesIO(body)
        try:
            value = fastavro.schemaless_reader(stream, self.avro, None)
        except Exception as exc:  # whatever the reader makes of bytes from a topic: theirs
            raise AvroMessageError(
                DeadLetterReason.MALFORMED_AVRO,
                f"cannot read the Avro body under schema {self.schema_id}: {exc!r}",
            ) from None
        left = len(body) - stream.tell()
        if left:
            raise AvroMessageError(
                DeadLetterReason.MALFORMED_AVRO,
                f"{left} bytes left after the record of schema {self.schema_id}: the writer "
                "used another schema",
            )
        return value if self.convert is None or value is None else self.convert(value)

    def transcode(self, message: bytes) -> bytes:
        """The message in the JSON converter's form (``{"schema": ..., "payload": ...}``)."""
        value = self.read(memoryview(message)[_HEADER.size :])
        try:
            payload = orjson.dumps(value)
        except orjson.JSONEncodeError as exc:
            raise AvroMessageError(
                DeadLetterReason.MALFORMED_AVRO,
                f"the record of schema {self.schema_id} has no JSON form: {exc}",
            ) from None
        return b'{"schema":' + self.connect_json + b',"payload":' + payload + b"}"


def compile_schema(schema_id: int, text: str) -> CompiledSchema:
    """Translate the Avro schema ``text`` of ``schema_id``; raises :class:`AvroMessageError`
    (``unsupported_schema``) when it is not valid Avro or has no Connect form."""
    import fastavro

    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UnsupportedAvro(f"schema {schema_id} is not JSON: {exc}") from None
    connect, convert, optional = _Translator().translate(document, None)
    if optional:
        connect = {**connect, "optional": True}
    try:
        parsed = fastavro.parse_schema(_without_logical_types(document))  # type: ignore[arg-type]
    except (fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError) as exc:
        raise UnsupportedAvro(f"schema {schema_id} is not valid Avro: {exc}") from None
    return CompiledSchema(schema_id, parsed, connect, convert)


def _without_logical_types(schema: object) -> object:
    if isinstance(schema, dict):
        return {k: _without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_without_logical_types(v) for v in schema]
    return schema


class _Translator:
    """Avro schema -> Connect schema (the inverse of Connect's ``AvroData``), with the value
    conversion each part needs. Named types are resolved as Avro resolves them."""

    def __init__(self) -> None:
        self.named: dict[str, tuple[dict[str, object], Convert | None]] = {}
        self.building: set[str] = set()

    def translate(
        self, schema: object, namespace: str | None
    ) -> tuple[dict[str, object], Convert | None, bool]:
        """``(connect schema, conversion, optional)``; optional for a union with null."""
        if isinstance(schema, list):
            return self._union(schema, namespace)
        connect, convert = self._single(schema, namespace)
        return connect, convert, False

    def _single(
        self, schema: object, namespace: str | None
    ) -> tuple[dict[str, object], Convert | None]:
        if isinstance(schema, str):
            return self._reference(schema, namespace)
        if not isinstance(schema, dict):
            raise UnsupportedAvro(f"not an Avro schema: {schema!r}")
        kind = schema.get("type")
        if isinstance(kind, dict | list):
            connect, convert, optional = self.translate(kind, namespace)
            if optional:
                raise UnsupportedAvro("a union nested in a type has no Connect form")
            return connect, convert
        if kind in ("record", "error"):
            return self._record(schema, namespace)
        if kind == "enum":
            return self._named(schema, namespace, self._enum(schema), None)
        if kind == "fixed":
            return self._named(schema, namespace, self._primitive("bytes", schema)[0], _base64)
        if kind == "array":
            return self._array(schema, namespace)
        if kind == "map":
            return self._map(schema, namespace)
        if isinstance(kind, str) and kind in _PRIMITIVE_TYPES:
            return self._primitive(kind, schema)
        raise UnsupportedAvro(f"unsupported Avro type {kind!r}")

    def _reference(
        self, schema: str, namespace: str | None
    ) -> tuple[dict[str, object], Convert | None]:
        """A primitive type's name, or a named type defined earlier in the schema."""
        if schema in _PRIMITIVE_TYPES:
            return self._primitive(schema, {})
        name = _fullname(schema, namespace)
        if name in self.building:
            raise UnsupportedAvro(f"recursive type {name} has no Connect form")
        if name not in self.named:
            raise UnsupportedAvro(f"unknown type {schema!r}")
        return self.named[name]

    def _map(
        self, schema: Mapping[str, object], namespace: str | None
    ) -> tuple[dict[str, object], Convert | None]:
        values, convert, optional = self.translate(schema.get("values"), namespace)
        connect = _described(
            {"type": "map", "keys": {"type": "string", "optional": False},
             "values": {**values, "optional": optional}},
            schema,
        )  # fmt: skip
        if convert is None:
            return connect, None
        return connect, lambda v: {k: None if x is None else convert(x) for k, x in v.items()}

    def _union(
        self, branches: list[object], namespace: str | None
    ) -> tuple[dict[str, object], Convert | None, bool]:
        others = [b for b in branches if b != "null"]
        if len(others) != 1:
            raise UnsupportedAvro(
                f"union {orjson.dumps(branches).decode()[:120]} is not [null, T]: Connect "
                "writes only those for Debezium's optional fields"
            )
        connect, convert = self._single(others[0], namespace)
        return connect, convert, len(others) < len(branches)

    def _primitive(
        self, kind: str, schema: Mapping[str, object]
    ) -> tuple[dict[str, object], Convert | None]:
        connect_type = {
            "int": "int32", "long": "int64", "float": "float", "double": "double",
            "boolean": "boolean", "string": "string", "bytes": "bytes",
        }.get(kind)  # fmt: skip
        if connect_type is None:
            raise UnsupportedAvro(f"Avro {kind!r} alone has no Connect form")
        declared = schema.get("connect.type")
        if kind == "int" and declared in _CONNECT_INT_TYPES:
            connect_type = str(declared)
        connect: dict[str, object] = {"type": connect_type}
        logical = schema.get("logicalType")
        name = schema.get("connect.name")
        if not isinstance(name, str) and isinstance(logical, str):
            name = _LOGICAL_NAMES.get(logical)
        if isinstance(name, str):
            connect["name"] = name
        parameters = schema.get("connect.parameters")
        if isinstance(parameters, dict):
            connect["parameters"] = {str(k): str(v) for k, v in parameters.items()}
        elif logical == "decimal":
            connect["parameters"] = {
                "scale": str(schema.get("scale", 0)),
                "connect.decimal.precision": str(schema.get("precision", 38)),
            }
        connect = _described(connect, schema)
        if connect_type == "bytes":
            return connect, _base64
        if connect_type in ("float", "double"):
            return connect, _float
        return connect, None

    def _enum(self, schema: Mapping[str, object]) -> dict[str, object]:
        """An enum is a string in Connect (``AvroData`` keeps the symbols as parameters)."""
        connect: dict[str, object] = {"type": "string"}
        name = schema.get("connect.name")
        if isinstance(name, str):
            connect["name"] = name
        parameters = schema.get("connect.parameters")
        if isinstance(parameters, dict):
            connect["parameters"] = {str(k): str(v) for k, v in parameters.items()}
        return _described(connect, schema)

    def _record(
        self, schema: Mapping[str, object], namespace: str | None
    ) -> tuple[dict[str, object], Convert | None]:
        name = _fullname(str(schema.get("name", "")), _namespace(schema, namespace))
        inner = name.rpartition(".")[0] or None
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise UnsupportedAvro(f"record {name} has no list of fields")
        self.building.add(name)
        children: list[dict[str, object]] = []
        converts: list[tuple[str, Convert]] = []
        for item in fields:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise UnsupportedAvro(f"record {name} has a field without a name")
            child, convert, optional = self.translate(item.get("type"), inner)
            children.append({**child, "optional": optional, "field": item["name"]})
            if convert is not None:
                converts.append((item["name"], convert))
        self.building.discard(name)
        connect: dict[str, object] = {"type": "struct", "fields": children}
        connect_name = schema.get("connect.name")
        connect["name"] = connect_name if isinstance(connect_name, str) else name
        connect = _described(connect, schema)
        return self._named(schema, namespace, connect, _record_convert(converts))

    def _array(
        self, schema: Mapping[str, object], namespace: str | None
    ) -> tuple[dict[str, object], Convert | None]:
        items = schema.get("items")
        entry = _map_entry(items, namespace)
        if entry is not None:  # AvroData's form of a map whose keys are not strings
            key, key_convert, key_optional = self.translate(entry[0], namespace)
            value, value_convert, value_optional = self.translate(entry[1], namespace)
            connect: dict[str, object] = {
                "type": "map",
                "keys": {**key, "optional": key_optional},
                "values": {**value, "optional": value_optional},
            }

            def pairs(v: list[dict[str, Any]]) -> list[list[Any]]:
                out = []
                for e in v:
                    k, x = e["key"], e["value"]
                    if k is not None and key_convert is not None:
                        k = key_convert(k)
                    if x is not None and value_convert is not None:
                        x = value_convert(x)
                    out.append([k, x])
                return out

            return _described(connect, schema), pairs
        item, convert, optional = self.translate(items, namespace)
        connect = _described({"type": "array", "items": {**item, "optional": optional}}, schema)
        if convert is None:
            return connect, None
        return connect, lambda v: [None if x is None else convert(x) for x in v]

    def _named(
        self,
        schema: Mapping[str, object],
        namespace: str | None,
        connect: dict[str, object],
        convert: Convert | None,
    ) -> tuple[dict[str, object], Convert | None]:
        name = _fullname(str(schema.get("name", "")), _namespace(schema, namespace))
        self.named[name] = (connect, convert)
        aliases = schema.get("aliases")
        for alias in aliases if isinstance(aliases, list) else ():
            self.named[_fullname(str(alias), _namespace(schema, namespace))] = (connect, convert)
        return connect, convert


def _record_convert(converts: list[tuple[str, Convert]]) -> Convert | None:
    if not converts:
        return None
    pairs = tuple(converts)

    def convert(value: dict[str, Any]) -> dict[str, Any]:
        for name, change in pairs:
            found = value.get(name)
            if found is not None:
                value[name] = change(found)
        return value

    return convert


def _map_entry(items: object, namespace: str | None) -> tuple[object, object] | None:
    """Key and value schemas of ``AvroData``'s ``MapEntry`` record, if ``items`` is one."""
    if not isinstance(items, dict) or items.get("type") != "record":
        return None
    name = str(items.get("name", "")).rpartition(".")[2]
    if items.get("connect.internal.type") != _MAP_ENTRY and name != _MAP_ENTRY:
        return None
    fields = {
        f.get("name"): f.get("type") for f in items.get("fields") or () if isinstance(f, dict)
    }
    if set(fields) != {"key", "value"}:
        return None
    return fields["key"], fields["value"]


def _described(connect: dict[str, object], schema: Mapping[str, object]) -> dict[str, object]:
    version = schema.get("connect.version")
    if isinstance(version, int):
        connect["version"] = version
    return connect


def _namespace(schema: Mapping[str, object], enclosing: str | None) -> str | None:
    namespace = schema.get("namespace")
    return namespace if isinstance(namespace, str) else enclosing


def _fullname(name: str, namespace: str | None) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


# -- transcoding a batch -------------------------------------------------------------------------


def decode_avro_chunks(
    chunks: Iterable[RecordChunk],
    config: DecoderConfig,
    hold: RecordHold | None = None,
    source: SchemaSource | None = None,
) -> DecodedBatch:
    """:func:`~ingest.debezium.decode_chunks` for Avro-encoded topics: each message transcoded
    by its schema id, then decoded as JSON; dead letters keep the original bytes.

    ``source`` defaults to the registry of ``config.avro``."""
    from ingest.debezium.decoder import decode_json_chunks

    if source is None:
        if config.avro is None:
            raise DecoderConfigError("Avro decoding needs a schema registry (config.avro)")
        source = config.avro.source()
    transcoder = _Transcoder(config, source)
    decoded = decode_json_chunks(transcoder.transcode(chunks), config, hold)
    return transcoder.restore(decoded)


class _Transcoder:
    def __init__(self, config: DecoderConfig, source: SchemaSource) -> None:
        self.config = config
        self.source = source
        compiled = getattr(source, "compiled", None)
        #: Compiled schemas by id: the source's own (process-wide) when it keeps one.
        self.compiled: dict[int, CompiledSchema | AvroMessageError] = (
            compiled if isinstance(compiled, dict) else {}
        )
        self.unknown: dict[int, UnknownSchema] = {}
        self.dead: list[DeadLetter] = []
        #: The original chunks of those transcoded, by topic-partition, for the dead letters.
        self.originals: dict[tuple[str, int], list[RecordChunk]] = {}
        #: Keys that failed to transcode: (topic, partition, offset) -> why.
        self.bad_keys: dict[tuple[str, int, int], str] = {}

    def schema(self, schema_id: int) -> CompiledSchema:
        """The compiled schema of an id. A schema, or the fact that it has no Connect form, is
        kept for the process (an id's schema never changes); an id the registry did not know
        is remembered for this batch only (a registry restored from a backup may know it
        later)."""
        found = self.compiled.get(schema_id) or self.unknown.get(schema_id)
        if found is None:
            try:
                found = compile_schema(schema_id, self.source.schema_text(schema_id))
            except UnknownSchema as exc:
                found = self.unknown[schema_id] = exc
            except AvroMessageError as exc:
                found = exc
            if not isinstance(found, UnknownSchema):
                self.compiled[schema_id] = found
        if isinstance(found, AvroMessageError):
            raise found
        return found

    def message(self, value: bytes) -> bytes:
        return self.schema(schema_id(value)).transcode(value)

    def transcode(self, chunks: Iterable[RecordChunk]) -> Iterator[RecordChunk]:
        config = self.config
        for chunk in chunks:
            route = route_topic(
                chunk.topic, config.topic_tables, config.namespaces, config.ignored_topics
            )
            if route.table is None:  # ignored or unmapped: the JSON decoder counts or files it
                yield chunk
                continue
            values: list[bytes | None] = []
            keep: list[int] = []
            for index, raw in enumerate(chunk.values):
                value = raw
                if raw:
                    try:
                        value = self.message(raw)
                    except AvroMessageError as exc:
                        self.dead.append(
                            DeadLetter.of(chunk.record(index), exc.reason, str(exc), route.table)
                        )
                        continue
                values.append(value)
                keep.append(index)
            self.originals.setdefault((chunk.topic, chunk.partition), []).append(chunk)
            yield self._chunk(chunk, values, keep)

    def _chunk(
        self, chunk: RecordChunk, values: list[bytes | None], keep: list[int]
    ) -> RecordChunk:
        whole = len(keep) == len(chunk)
        offsets = chunk.offsets if whole else [chunk.offsets[i] for i in keep]
        stamps = chunk.timestamps_ms if whole else [chunk.timestamps_ms[i] for i in keep]
        keys = _Keys(self, chunk, None if whole else keep)
        return RecordChunk(chunk.topic, chunk.partition, offsets, keys, values, stamps)

    def key(self, chunk: RecordChunk, index: int) -> bytes | None:
        raw = chunk.keys[index]
        if not raw or raw[0] != MAGIC_BYTE:
            return raw
        try:
            return self.message(raw)
        except AvroMessageError as exc:
            self.bad_keys[(chunk.topic, chunk.partition, chunk.offsets[index])] = str(exc)
            return raw  # the JSON decoder refuses it (bad_key); restore() puts this error back

    def restore(self, decoded: DecodedBatch) -> DecodedBatch:
        """The decoder's dead letters with the original bytes (and Avro's reason for a key)."""
        letters: list[DeadLetter] = list(self.dead)
        for found in decoded.dead_letters:
            letter = found
            original = self._original(letter.topic, letter.partition, letter.offset)
            if original is not None:
                chunk, index = original
                letter = replace(letter, key=chunk.keys[index], value=chunk.values[index])
                why = self.bad_keys.get((letter.topic, letter.partition, letter.offset))
                if why is not None and letter.reason is DeadLetterReason.BAD_KEY:
                    letter = replace(letter, error=f"the message key: {why}")
            letters.append(letter)
        return replace(decoded, dead_letters=tuple(letters))

    def _original(self, topic: str, partition: int, offset: int) -> tuple[RecordChunk, int] | None:
        for chunk in self.originals.get((topic, partition), ()):
            offsets = chunk.offsets
            if isinstance(offsets, range):
                if offset in offsets:
                    return chunk, offsets.index(offset)
                continue
            at = bisect_left(offsets, offset)
            if at < len(offsets) and offsets[at] == offset:
                return chunk, at
        return None


class _Keys(Sequence[bytes | None]):
    """A transcoded chunk's keys, transcoded when the decoder reads one (few are read)."""

    def __init__(self, transcoder: _Transcoder, chunk: RecordChunk, keep: list[int] | None) -> None:
        self._transcoder, self._chunk, self._keep = transcoder, chunk, keep

    def __len__(self) -> int:
        return len(self._chunk) if self._keep is None else len(self._keep)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        original = index if self._keep is None else self._keep[index]
        return self._transcoder.key(self._chunk, original)
