package raw

import "unsafe"

// Go mirrors of the header's structs: the same fields in the same order, with the same
// offsets and sizes as the C compiler lays them out on 64-bit targets (the ABI test checks
// every field against bindings/abi/gen_layout.py). Field names are the C names in
// CamelCase (struct_size -> StructSize, kv_dtype_k -> KvDtypeK). Enum fields are int32 or
// uint32 as the header types them; C pointers are Go pointers to C memory (or to Go memory
// that holds no Go pointers, for the duration of one call); size_t is uintptr.

// Engine is the opaque llmkv_engine. Only pointers to it exist (returned by the library).
type Engine struct{ _ [0]byte }

// Session is the opaque llmkv_session.
type Session struct{ _ [0]byte }

// Prefix is the opaque llmkv_prefix.
type Prefix struct{ _ [0]byte }

// TpTransport mirrors llmkv_tp_transport (0.5): how the ranks of tensor parallelism across
// processes exchange bytes. Broadcast and AllGather are C function pointers of the header's
// types llmkv_tp_broadcast_fn and llmkv_tp_all_gather_fn (a Go function cannot be one).
type TpTransport struct {
	Ctx       unsafe.Pointer
	Rank      int32
	Size      int32
	Broadcast unsafe.Pointer
	AllGather unsafe.Pointer
}

// EngineParams mirrors llmkv_engine_params (0.5: 120 bytes; 0.4: 104; 0.3: 96).
type EngineParams struct {
	StructSize       uint32
	ModelPath        *byte
	Backend          int32
	Devices          *int32
	NDevices         uint32
	NThreads         uint32
	KvDtypeK         int32
	KvDtypeV         int32
	KvBlockTokens    uint32
	KvDeviceBytes    uint64
	KvHostBytes      uint64
	MaxBatchTokens   uint32
	MaxContext       uint32
	Flags            uint32
	MaxSessions      uint32
	KvResidualTokens uint32
	KvRotation       int32
	SpinUs           int32
	ThreadPriority   int32
	TpSize           uint32
	TpTransport      *TpTransport
}

// EngineInfo mirrors llmkv_engine_info.
type EngineInfo struct {
	StructSize            uint32
	ModelName             [128]byte
	Architecture          [32]byte
	BackendName           [32]byte
	Backend               uint32
	NVocab                uint32
	NCtxTrain             uint32
	MaxContext            uint32
	NLayers               uint32
	NEmbd                 uint32
	NHeads                uint32
	NKvHeads              uint32
	HeadDim               uint32
	NThreads              uint32
	KvBlockTokens         uint32
	KvDtypeK              uint32
	KvDtypeV              uint32
	TpSize                uint32
	NParams               uint64
	WeightBytes           uint64
	KvBytesPerTokenDevice uint64
	KvBytesPerTokenTail   uint64
	KvDeviceBytes         uint64
	KvBlocksTotal         uint32
	KvTailBlocksTotal     uint32
	KvResidualTokens      uint32
	KvRotateK             uint32
	KvRotateV             uint32
	BosToken              int32
	EosToken              int32
	EotToken              int32
	NUnrepresentableBytes uint32
	KvWindow              uint32
	KvLayerGroups         uint32
	KvBytesPerTokenGlobal uint64
	KvBytesPerTokenRank   uint64
	WeightBytesRank       uint64
	NExpert               uint32 // appended in 0.6
	NExpertUsed           uint32
	NParamsActive         uint64
	WeightBytesActive     uint64
}

// Stats mirrors llmkv_stats.
type Stats struct {
	StructSize           uint32
	BlocksTotal          uint32
	BlocksFree           uint32
	BlocksCached         uint32
	BlocksUsed           uint32
	TailBlocksTotal      uint32
	TailBlocksUsed       uint32
	SessionsTotal        uint32
	SessionsIdle         uint32
	SessionsQueued       uint32
	SessionsPrefilling   uint32
	SessionsGenerating   uint32
	SessionsParked       uint32
	SessionsFinished     uint32
	KvBytesUsed          uint64
	TokensStored         uint64
	PrefixHitTokens      uint64
	PrefixMissTokens     uint64
	BytesToHost          uint64
	BytesToDevice        uint64
	Preemptions          uint64
	TokensPrefilled      uint64
	TokensGenerated      uint64
	Steps                uint64
	HostBytesTotal       uint64
	HostBytesUsed        uint64
	HostBlocks           uint64
	Parks                uint64
	Swaps                uint64
	Resumes              uint64
	CopyNs               uint64
	Demotions            uint64
	Promotions           uint64
	SampleNs             uint64
	GrammarMaskNs        uint64
	GrammarMasks         uint64
	GrammarMaskCacheHits uint64
	KvBytesUsedRank      uint64
	TpReduceNs           uint64
	TpReduces            uint64
}

// ChatMessage mirrors llmkv_chat_message.
type ChatMessage struct {
	Role    *byte
	Content *byte
}

// Sampling mirrors llmkv_sampling.
type Sampling struct {
	Temperature   float32
	TopK          int32
	TopP          float32
	MinP          float32
	RepeatPenalty float32
	Seed          uint64
	RepeatLastN   int32
}

// LogitBias mirrors llmkv_logit_bias.
type LogitBias struct {
	Token int32
	Bias  float32
}

// SessionParams mirrors llmkv_session_params.
type SessionParams struct {
	StructSize        uint32
	Prefix            *Prefix
	Sampling          Sampling
	MaxNewTokens      uint32
	StopTokens        *int32
	NStopTokens       uint32
	Priority          int32
	UserData          unsafe.Pointer
	StopStrings       **byte
	StopStringLengths *uintptr
	NStopStrings      uint32
	LogitBias         *LogitBias
	NLogitBias        uint32
	MinNewTokens      uint32
	GrammarKind       uint32
	Grammar           *byte
	GrammarLen        uintptr
	GrammarRoot       *byte
}

// SessionInfo mirrors llmkv_session_info.
type SessionInfo struct {
	StructSize      uint32
	State           uint32
	FinishReason    uint32
	NTokens         uint32
	NCached         uint32
	NGenerated      uint32
	NBlocks         uint32
	Tier            uint32
	Priority        int32
	StopString      int32
	TextHeld        uint32
	HasGrammar      uint32
	GrammarComplete uint32
}

// Event mirrors llmkv_event.
type Event struct {
	Session      *Session
	UserData     unsafe.Pointer
	Kind         uint32
	Token        int32
	FinishReason uint32
	Status       int32
}
