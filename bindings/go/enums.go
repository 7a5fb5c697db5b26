package llmkv

import "llmkv.dev/llmkv/raw"

// Backend is llmkv_backend.
type Backend int32

const (
	BackendAuto Backend = raw.LLMKV_BACKEND_AUTO
	BackendCPU  Backend = raw.LLMKV_BACKEND_CPU
	BackendCUDA Backend = raw.LLMKV_BACKEND_CUDA
)

// KVDtype is llmkv_kv_dtype, the codec of sealed K or V blocks.
type KVDtype int32

const (
	KVF16         KVDtype = raw.LLMKV_KV_F16
	KVBF16        KVDtype = raw.LLMKV_KV_BF16
	KVFP8E4M3     KVDtype = raw.LLMKV_KV_FP8_E4M3
	KVInt8        KVDtype = raw.LLMKV_KV_INT8
	KVInt4        KVDtype = raw.LLMKV_KV_INT4
	KVInt4Compact KVDtype = raw.LLMKV_KV_INT4_COMPACT // 0.28x of f16, CPU backend only
)

// KVRotation is llmkv_kv_rotation.
type KVRotation int32

const (
	KVRotationAuto KVRotation = raw.LLMKV_KV_ROTATION_AUTO
	KVRotationNone KVRotation = raw.LLMKV_KV_ROTATION_NONE
	KVRotationK    KVRotation = raw.LLMKV_KV_ROTATION_K
	KVRotationV    KVRotation = raw.LLMKV_KV_ROTATION_V
	KVRotationKV   KVRotation = raw.LLMKV_KV_ROTATION_KV
)

// KVSinkMode picks the KV sink flags (LLMKV_ENGINE_KV_SINK, LLMKV_ENGINE_NO_KV_SINK).
type KVSinkMode int

const (
	KVSinkAuto KVSinkMode = iota // neither flag: on with an int4 codec
	KVSinkOn                     // LLMKV_ENGINE_KV_SINK
	KVSinkOff                    // LLMKV_ENGINE_NO_KV_SINK
)

// GrammarKind is llmkv_grammar_kind.
type GrammarKind uint32

const (
	GrammarNone       GrammarKind = raw.LLMKV_GRAMMAR_NONE
	GrammarGBNF       GrammarKind = raw.LLMKV_GRAMMAR_GBNF
	GrammarJSONSchema GrammarKind = raw.LLMKV_GRAMMAR_JSON_SCHEMA
)

// SessionState is llmkv_session_state.
type SessionState uint32

const (
	SessionIdle       SessionState = raw.LLMKV_SESSION_IDLE
	SessionQueued     SessionState = raw.LLMKV_SESSION_QUEUED
	SessionPrefilling SessionState = raw.LLMKV_SESSION_PREFILLING
	SessionGenerating SessionState = raw.LLMKV_SESSION_GENERATING
	SessionParked     SessionState = raw.LLMKV_SESSION_PARKED
	SessionFinished   SessionState = raw.LLMKV_SESSION_FINISHED
)

func (s SessionState) String() string {
	switch s {
	case SessionIdle:
		return "IDLE"
	case SessionQueued:
		return "QUEUED"
	case SessionPrefilling:
		return "PREFILLING"
	case SessionGenerating:
		return "GENERATING"
	case SessionParked:
		return "PARKED"
	case SessionFinished:
		return "FINISHED"
	}
	return "UNKNOWN"
}

// FinishReason is llmkv_finish_reason.
type FinishReason uint32

const (
	FinishNone       FinishReason = raw.LLMKV_FINISH_NONE
	FinishStop       FinishReason = raw.LLMKV_FINISH_STOP
	FinishLength     FinishReason = raw.LLMKV_FINISH_LENGTH
	FinishCancelled  FinishReason = raw.LLMKV_FINISH_CANCELLED
	FinishContext    FinishReason = raw.LLMKV_FINISH_CONTEXT
	FinishConstraint FinishReason = raw.LLMKV_FINISH_CONSTRAINT
)

func (f FinishReason) String() string {
	switch f {
	case FinishNone:
		return "NONE"
	case FinishStop:
		return "STOP"
	case FinishLength:
		return "LENGTH"
	case FinishCancelled:
		return "CANCELLED"
	case FinishContext:
		return "CONTEXT"
	case FinishConstraint:
		return "CONSTRAINT"
	}
	return "UNKNOWN"
}

// Tier is llmkv_tier: where a session's KV lives.
type Tier uint32

const (
	TierDevice Tier = raw.LLMKV_TIER_DEVICE
	TierHost   Tier = raw.LLMKV_TIER_HOST
	TierMixed  Tier = raw.LLMKV_TIER_MIXED
)

// EventKind is llmkv_event_kind.
type EventKind uint32

const (
	EventToken EventKind = raw.LLMKV_EVENT_TOKEN
	EventDone  EventKind = raw.LLMKV_EVENT_DONE
	EventError EventKind = raw.LLMKV_EVENT_ERROR
)

func (k EventKind) String() string {
	switch k {
	case EventToken:
		return "TOKEN"
	case EventDone:
		return "DONE"
	case EventError:
		return "ERROR"
	}
	return "UNKNOWN"
}

// Flags of Tokenize, LoadPrefix and the Submit calls.
const (
	TokenizeAddBOS       uint32 = raw.LLMKV_TOKENIZE_ADD_BOS
	TokenizeParseSpecial uint32 = raw.LLMKV_TOKENIZE_PARSE_SPECIAL
	TokenizeStrict       uint32 = raw.LLMKV_TOKENIZE_STRICT
	PrefixLoadShare      uint32 = raw.LLMKV_PREFIX_LOAD_SHARE
	PrefixLoadAnyKernel  uint32 = raw.LLMKV_PREFIX_LOAD_ANY_KERNEL
	SubmitGenerate       uint32 = raw.LLMKV_SUBMIT_GENERATE
)

// LogLevel is llmkv_log_level.
type LogLevel int32

const (
	LogError LogLevel = raw.LLMKV_LOG_ERROR
	LogWarn  LogLevel = raw.LLMKV_LOG_WARN
	LogInfo  LogLevel = raw.LLMKV_LOG_INFO
	LogDebug LogLevel = raw.LLMKV_LOG_DEBUG
)

// SetLogLevel keeps the library's default logger (stderr) and sets the most verbose level it
// writes. A Go log callback is not offered (callbacks do not cross cgo in this binding).
func SetLogLevel(level LogLevel) { raw.LogSet(nil, nil, int32(level)) }

// Version is the loaded library's version ("0.6.0") and number (600).
func Version() (string, int) { return raw.VersionString(), int(raw.Version()) }
