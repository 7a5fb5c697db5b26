module llmkv.dev/llmkv

go 1.19
