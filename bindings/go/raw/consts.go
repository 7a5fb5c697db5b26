package raw

// Constants of include/llmkv.h under their C names, with their C values. The ABI test
// (abi_test.go) checks that every constant the header defines is declared here with the
// same value, so a constant added to the header fails the tests until it is mirrored.

// Version of the header this binding mirrors.
const (
	LLMKV_VERSION_MAJOR = 0
	LLMKV_VERSION_MINOR = 6
	LLMKV_VERSION_PATCH = 0
)

// Status codes (llmkv_status).
const (
	LLMKV_OK                   = 0
	LLMKV_ERR_INVALID_ARGUMENT = -1
	LLMKV_ERR_OUT_OF_MEMORY    = -2
	LLMKV_ERR_KV_CAPACITY      = -3
	LLMKV_ERR_IO               = -4
	LLMKV_ERR_MODEL_FORMAT     = -5
	LLMKV_ERR_UNSUPPORTED      = -6
	LLMKV_ERR_BACKEND          = -7
	LLMKV_ERR_STATE            = -8
	LLMKV_ERR_SNAPSHOT_FORMAT  = -9
	LLMKV_ERR_CANCELLED        = -10
	LLMKV_ERR_INTERNAL         = -99
)

// Flags.
const (
	LLMKV_ENGINE_PREFIX_CACHE       = 0x1
	LLMKV_ENGINE_KEEP_WINDOW_BLOCKS = 0x2
	LLMKV_ENGINE_KV_SINK            = 0x4
	LLMKV_ENGINE_NO_KV_SINK         = 0x8
	LLMKV_TOKENIZE_ADD_BOS          = 0x1
	LLMKV_TOKENIZE_PARSE_SPECIAL    = 0x2
	LLMKV_TOKENIZE_STRICT           = 0x4
	LLMKV_PREFIX_LOAD_SHARE         = 0x1
	LLMKV_PREFIX_LOAD_ANY_KERNEL    = 0x2
	LLMKV_SUBMIT_GENERATE           = 0x1
)

// llmkv_log_level
const (
	LLMKV_LOG_ERROR = 0
	LLMKV_LOG_WARN  = 1
	LLMKV_LOG_INFO  = 2
	LLMKV_LOG_DEBUG = 3
)

// llmkv_backend
const (
	LLMKV_BACKEND_AUTO = 0
	LLMKV_BACKEND_CPU  = 1
	LLMKV_BACKEND_CUDA = 2
)

// llmkv_kv_dtype
const (
	LLMKV_KV_F16          = 0
	LLMKV_KV_BF16         = 1
	LLMKV_KV_FP8_E4M3     = 2
	LLMKV_KV_INT8         = 3
	LLMKV_KV_INT4         = 4
	LLMKV_KV_INT4_COMPACT = 5
)

// llmkv_kv_rotation
const (
	LLMKV_KV_ROTATION_AUTO = 0
	LLMKV_KV_ROTATION_NONE = 1
	LLMKV_KV_ROTATION_K    = 2
	LLMKV_KV_ROTATION_V    = 3
	LLMKV_KV_ROTATION_KV   = 4
)

// llmkv_grammar_kind
const (
	LLMKV_GRAMMAR_NONE        = 0
	LLMKV_GRAMMAR_GBNF        = 1
	LLMKV_GRAMMAR_JSON_SCHEMA = 2
)

// llmkv_session_state
const (
	LLMKV_SESSION_IDLE       = 0
	LLMKV_SESSION_QUEUED     = 1
	LLMKV_SESSION_PREFILLING = 2
	LLMKV_SESSION_GENERATING = 3
	LLMKV_SESSION_PARKED     = 4
	LLMKV_SESSION_FINISHED   = 5
)

// llmkv_finish_reason
const (
	LLMKV_FINISH_NONE       = 0
	LLMKV_FINISH_STOP       = 1
	LLMKV_FINISH_LENGTH     = 2
	LLMKV_FINISH_CANCELLED  = 3
	LLMKV_FINISH_CONTEXT    = 4
	LLMKV_FINISH_CONSTRAINT = 5
)

// llmkv_tier
const (
	LLMKV_TIER_DEVICE = 0
	LLMKV_TIER_HOST   = 1
	LLMKV_TIER_MIXED  = 2
)

// llmkv_event_kind
const (
	LLMKV_EVENT_TOKEN = 1
	LLMKV_EVENT_DONE  = 2
	LLMKV_EVENT_ERROR = 3
)
