// Types.cs - enums, the exception, option classes and the plain data the idiomatic layer
// hands out. Enum values are tied to the raw constants, so the ABI test of NativeMethods
// covers them too.
using System;
using System.Collections.Generic;
using N = Llmkv.Native.NativeMethods;

namespace Llmkv
{
    /// <summary>llmkv_status. Values are fixed forever by the header.</summary>
    public enum Status
    {
        Ok = N.LLMKV_OK,
        InvalidArgument = N.LLMKV_ERR_INVALID_ARGUMENT,
        OutOfMemory = N.LLMKV_ERR_OUT_OF_MEMORY,
        KvCapacity = N.LLMKV_ERR_KV_CAPACITY,
        Io = N.LLMKV_ERR_IO,
        ModelFormat = N.LLMKV_ERR_MODEL_FORMAT,
        Unsupported = N.LLMKV_ERR_UNSUPPORTED,
        Backend = N.LLMKV_ERR_BACKEND,
        State = N.LLMKV_ERR_STATE,
        SnapshotFormat = N.LLMKV_ERR_SNAPSHOT_FORMAT,
        Cancelled = N.LLMKV_ERR_CANCELLED,
        Internal = N.LLMKV_ERR_INTERNAL,
    }

    public enum LogLevel { Error = N.LLMKV_LOG_ERROR, Warn = N.LLMKV_LOG_WARN, Info = N.LLMKV_LOG_INFO, Debug = N.LLMKV_LOG_DEBUG }

    public enum Backend { Auto = N.LLMKV_BACKEND_AUTO, Cpu = N.LLMKV_BACKEND_CPU, Cuda = N.LLMKV_BACKEND_CUDA }

    public enum KvDtype
    {
        F16 = N.LLMKV_KV_F16, BF16 = N.LLMKV_KV_BF16, Fp8E4M3 = N.LLMKV_KV_FP8_E4M3,
        Int8 = N.LLMKV_KV_INT8, Int4 = N.LLMKV_KV_INT4,
        /// <summary>0.28x of f16 (Int4: 0.34x) at somewhat lower quality; CPU backend only.</summary>
        Int4Compact = N.LLMKV_KV_INT4_COMPACT,
    }

    public enum KvRotation
    {
        Auto = N.LLMKV_KV_ROTATION_AUTO, None = N.LLMKV_KV_ROTATION_NONE, K = N.LLMKV_KV_ROTATION_K,
        V = N.LLMKV_KV_ROTATION_V, KV = N.LLMKV_KV_ROTATION_KV,
    }

    [Flags]
    public enum EngineFlags : uint
    {
        None = 0,
        PrefixCache = N.LLMKV_ENGINE_PREFIX_CACHE,
        KeepWindowBlocks = N.LLMKV_ENGINE_KEEP_WINDOW_BLOCKS,
        /// <summary>Position 0's K and V kept in fp16 (default: on with an int4 codec on the CPU).</summary>
        KvSink = N.LLMKV_ENGINE_KV_SINK,
        NoKvSink = N.LLMKV_ENGINE_NO_KV_SINK,
    }

    [Flags]
    public enum TokenizeFlags : uint
    {
        None = 0,
        AddBos = N.LLMKV_TOKENIZE_ADD_BOS,
        ParseSpecial = N.LLMKV_TOKENIZE_PARSE_SPECIAL,
        Strict = N.LLMKV_TOKENIZE_STRICT,
    }

    [Flags]
    public enum PrefixLoadFlags : uint
    {
        None = 0,
        Share = N.LLMKV_PREFIX_LOAD_SHARE,
        AnyKernel = N.LLMKV_PREFIX_LOAD_ANY_KERNEL,
    }

    public enum GrammarKind { None = N.LLMKV_GRAMMAR_NONE, Gbnf = N.LLMKV_GRAMMAR_GBNF, JsonSchema = N.LLMKV_GRAMMAR_JSON_SCHEMA }

    public enum SessionState
    {
        Idle = N.LLMKV_SESSION_IDLE, Queued = N.LLMKV_SESSION_QUEUED, Prefilling = N.LLMKV_SESSION_PREFILLING,
        Generating = N.LLMKV_SESSION_GENERATING, Parked = N.LLMKV_SESSION_PARKED, Finished = N.LLMKV_SESSION_FINISHED,
    }

    public enum FinishReason
    {
        None = N.LLMKV_FINISH_NONE, Stop = N.LLMKV_FINISH_STOP, Length = N.LLMKV_FINISH_LENGTH,
        Cancelled = N.LLMKV_FINISH_CANCELLED, Context = N.LLMKV_FINISH_CONTEXT, Constraint = N.LLMKV_FINISH_CONSTRAINT,
    }

    public enum Tier { Device = N.LLMKV_TIER_DEVICE, Host = N.LLMKV_TIER_HOST, Mixed = N.LLMKV_TIER_MIXED }

    public enum EventKind { Token = N.LLMKV_EVENT_TOKEN, Done = N.LLMKV_EVENT_DONE, Error = N.LLMKV_EVENT_ERROR }

    /// <summary>A failing llmkv call: the status and the library's detail message
    /// (llmkv_last_error, read on the calling thread right after the call).</summary>
    public class LlmkvException : Exception
    {
        public Status Status { get; }
        /// <summary>The library's detail message alone (Message is "STATUS_NAME: detail").</summary>
        public string Detail { get; }

        public LlmkvException(Status status, string detail)
            : base(Library.StatusString(status) + (string.IsNullOrEmpty(detail) ? "" : ": " + detail))
        {
            Status = status;
            Detail = detail ?? "";
        }
    }

    /// <summary>Engine parameters. A null property keeps the library's default
    /// (llmkv_engine_params_init).</summary>
    public sealed class EngineOptions
    {
        public string ModelPath { get; set; }
        public Backend? Backend { get; set; }
        public int[] Devices { get; set; }
        public uint? NThreads { get; set; }
        public KvDtype? KvDtypeK { get; set; }
        public KvDtype? KvDtypeV { get; set; }
        public uint? KvBlockTokens { get; set; }
        public ulong? KvDeviceBytes { get; set; }
        public ulong? KvHostBytes { get; set; }
        public uint? MaxBatchTokens { get; set; }
        public uint? MaxContext { get; set; }
        public EngineFlags? Flags { get; set; }
        public uint? MaxSessions { get; set; }
        public uint? KvResidualTokens { get; set; }
        public KvRotation? KvRotation { get; set; }
        /// <summary>0.4: microseconds an idle compute thread polls before sleeping (0..100000;
        /// -1 = LLMKV_SPIN_US, else 200). 0 for hosts whose own threads need the cores.</summary>
        public int? SpinUs { get; set; }
        /// <summary>0.4: 0 = llmkv's threads run at their creator's priority; 1..19 nice levels lower.</summary>
        public int? ThreadPriority { get; set; }
        /// <summary>0.5: tensor parallelism on CPU ranks run as threads of this process, NThreads
        /// split among them (the heads, feed-forward columns and vocabulary split over the ranks;
        /// the model's heads must divide by it, else Unsupported). 0 or 1 = none. With Backend
        /// Cuda, or several Devices, the ranks are GPU ranks (docs/PARALLELISM.md; not yet run
        /// on a GPU).</summary>
        public uint? TpSize { get; set; }

        public EngineOptions() { }
        public EngineOptions(string modelPath) { ModelPath = modelPath; }
    }

    /// <summary>llmkv_sampling. A null property keeps the library's default (greedy).</summary>
    public sealed class SamplingOptions
    {
        public float? Temperature { get; set; }
        public int? TopK { get; set; }
        public float? TopP { get; set; }
        public float? MinP { get; set; }
        public float? RepeatPenalty { get; set; }
        public ulong? Seed { get; set; }
        public int? RepeatLastN { get; set; }
    }

    public struct LogitBias
    {
        public int Token;
        public float Bias;
        public LogitBias(int token, float bias) { Token = token; Bias = bias; }
    }

    /// <summary>Session parameters. A null property keeps the library's default
    /// (llmkv_session_params_init). Arrays and strings are copied by the library at create.</summary>
    public sealed class SessionOptions
    {
        /// <summary>Start from this prefix (must belong to the same engine).</summary>
        public Prefix Prefix { get; set; }
        public SamplingOptions Sampling { get; set; }
        public uint? MaxNewTokens { get; set; }
        public int[] StopTokens { get; set; }
        public int? Priority { get; set; }
        public string[] StopStrings { get; set; }
        public LogitBias[] LogitBias { get; set; }
        public uint? MinNewTokens { get; set; }
        public GrammarKind GrammarKind { get; set; }
        public string Grammar { get; set; }
        public string GrammarRoot { get; set; }
        /// <summary>Any object; handed back as Session.Tag (kept on the managed side, not
        /// passed through user_data).</summary>
        public object Tag { get; set; }
    }

    /// <summary>One llmkv_event, with the session resolved to its managed object.</summary>
    public struct Event
    {
        public EventKind Kind;
        /// <summary>The session's managed object; null when it was already disposed.</summary>
        public Session Session;
        /// <summary>For Token.</summary>
        public int Token;
        /// <summary>For Done.</summary>
        public FinishReason FinishReason;
        /// <summary>For Error.</summary>
        public Status Status;

        public override string ToString()
        {
            switch (Kind)
            {
                case EventKind.Token: return "Token(" + Token + ")";
                case EventKind.Done: return "Done(" + FinishReason + ")";
                default: return "Error(" + Status + ")";
            }
        }
    }

    public struct ChatMessage
    {
        public string Role;
        public string Content;
        public ChatMessage(string role, string content) { Role = role; Content = content; }
    }

    /// <summary>llmkv_session_info.</summary>
    public struct SessionInfo
    {
        public SessionState State;
        public FinishReason FinishReason;
        public uint NTokens;
        public uint NCached;
        public uint NGenerated;
        public uint NBlocks;
        public Tier Tier;
        public int Priority;
        public int StopString;
        public uint TextHeld;
        public bool HasGrammar;
        public bool GrammarComplete;
    }

    /// <summary>llmkv_engine_info.</summary>
    public sealed class EngineInfo
    {
        public string ModelName, Architecture, BackendName;
        public Backend Backend;
        public uint NVocab, NCtxTrain, MaxContext, NLayers, NEmbd, NHeads, NKvHeads, HeadDim, NThreads;
        public uint KvBlockTokens;
        public KvDtype KvDtypeK, KvDtypeV;
        /// <summary>Tensor-parallel ranks (1: none).</summary>
        public uint TpSize;
        public ulong NParams, WeightBytes, KvBytesPerTokenDevice, KvBytesPerTokenTail, KvDeviceBytes;
        public uint KvBlocksTotal, KvTailBlocksTotal, KvResidualTokens;
        public bool KvRotateK, KvRotateV;
        public int BosToken, EosToken, EotToken;
        public uint NUnrepresentableBytes, KvWindow, KvLayerGroups;
        public ulong KvBytesPerTokenGlobal;
        /// <summary>0.5: sealed KV bytes per token on each rank (its KV heads); with one rank
        /// KvBytesPerTokenDevice.</summary>
        public ulong KvBytesPerTokenRank;
        /// <summary>0.5: weight bytes each rank reads (its slices and the replicated parts); with
        /// one rank WeightBytes.</summary>
        public ulong WeightBytesRank;
        /// <summary>0.6: a mixture of experts' experts per layer and experts per token (0 and 0:
        /// a dense model).</summary>
        public uint NExpert, NExpertUsed;
        /// <summary>0.6: the parameters and weight bytes one decoded token reads (a dense
        /// model's NParams and WeightBytes).</summary>
        public ulong NParamsActive, WeightBytesActive;
    }
}
