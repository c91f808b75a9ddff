package datafetch

// The public files morphlab uses, where they come from, and their pinned sizes and sha256 (of the files in the
// project's shared data directory, which SOURCES.md there describes). Two files of that directory have no public
// copy of the same bytes and are not here: eval/tinystories_val.txt (blank-line-separated stories from the start
// of the TinyStories validation split) and models/stories260K_expected_t0_n200.txt (llama2.c's run.c output).
const (
	tinyllamas = "https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K/"
	llama2c    = "https://raw.githubusercontent.com/karpathy/llama2.c/master/"
	azure      = "https://raw.githubusercontent.com/Azure/AzurePublicDataset/master/data/"
	vidur      = "https://raw.githubusercontent.com/microsoft/vidur/main/data/"
	fastchat   = "https://raw.githubusercontent.com/lm-sys/FastChat/main/fastchat/llm_judge/data/"
	llamacpp   = "https://raw.githubusercontent.com/ggml-org/llama.cpp/master/prompts/"
)

// Manifest lists every file `morphlab data fetch` downloads, by its path in the data directory.
var Manifest = []File{
	{Path: "models/stories260K.bin", URL: tinyllamas + "stories260K.bin", Size: 1056540,
		SHA256: "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696",
		What:   "TinyStories 260K, llama2.c v0 float32 checkpoint"},
	{Path: "models/tok512.bin", URL: tinyllamas + "tok512.bin", Size: 6227,
		SHA256: "037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312",
		What:   "its 512-token llama2.c tokenizer"},
	{Path: "models/stories260K.gguf",
		URL:  "https://huggingface.co/ggml-org/models-moved/resolve/499bc8821c6b12b4e53c5bffcb21ec206f212d81/tinyllamas/stories260K.gguf",
		Size: 1185376, SHA256: "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d",
		What: "the same weights as GGUF v3 (llama.cpp's test model)"},
	{Path: "models/tokenizer.bin", URL: llama2c + "tokenizer.bin", Size: 433869,
		SHA256: "50a52ef822ee9e83de5ce9d0be0a025a773d019437f58b5ff9dcafb063ece361",
		What:   "Llama 2 32000-token vocabulary, llama2.c format"},
	{Path: "models/tokenizer.model", URL: llama2c + "tokenizer.model", Size: 499723,
		SHA256: "9e556afd44213b6bd1be2b850ebbbd98f5481437a8021afaf58ee7fb1818d347",
		What:   "the same vocabulary as a SentencePiece model"},
	{Path: "traces/azure2023/AzureLLMInferenceTrace_conv.csv", URL: azure + "AzureLLMInferenceTrace_conv.csv", Size: 719188,
		SHA256: "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8",
		What:   "Azure LLM inference trace 2023, conversation"},
	{Path: "traces/azure2023/AzureLLMInferenceTrace_code.csv", URL: azure + "AzureLLMInferenceTrace_code.csv", Size: 320117,
		SHA256: "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
		What:   "Azure LLM inference trace 2023, code completion"},
	{Path: "traces/mooncake/conversation_trace.jsonl",
		URL:  "https://raw.githubusercontent.com/kvcache-ai/Mooncake/main/FAST25-release/traces/conversation_trace.jsonl",
		Size: 3029533, SHA256: "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
		What: "Mooncake (FAST'25) conversation trace"},
	{Path: "traces/vidur/splitwise_conv.csv", URL: vidur + "processed_traces/splitwise_conv.csv", Size: 382729,
		SHA256: "439e4138b7e384f316de614c071f7162be05b8af0cef866f82faacd1b0472249",
		What:   "the Azure conversation trace as Vidur replays it"},
	{Path: "traces/vidur/splitwise_code.csv", URL: vidur + "processed_traces/splitwise_code.csv", Size: 166195,
		SHA256: "f266b907d109d471c61283ab69771c17ad79a18b33ff6e96aa546346f52767a6",
		What:   "the Azure code trace as Vidur replays it"},
	{Path: "traces/lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
		URL:  vidur + "processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
		Size: 949600, SHA256: "6d6c296302a853e2669a674a96f269283e60c57e60363bd450588a1066919f9f",
		What: "ShareGPT request lengths (Llama 2 tokenizer)"},
	{Path: "profiles/vidur/a100/meta-llama/Llama-2-7b-hf/mlp.csv", URL: vidur + "profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv",
		Size: 706614, SHA256: "2cfacca979f32e83257753cf6fd815a71af8ba9a7a9d0643b18d9f54e8a37688",
		What: "Vidur operator times, Llama-2-7B on A100"},
	{Path: "profiles/vidur/a100/meta-llama/Meta-Llama-3-8B/mlp.csv", URL: vidur + "profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv",
		Size: 1204856, SHA256: "98c26488298e324e89db7349e213f75c856ae83dc6b17548a68636d2cb5efff0",
		What: "Vidur operator times, Llama-3-8B on A100"},
	{Path: "profiles/vidur/a100/codellama/CodeLlama-34b-Instruct-hf/mlp.csv",
		URL:  vidur + "profiling/compute/a100/codellama/CodeLlama-34b-Instruct-hf/mlp.csv",
		Size: 692374, SHA256: "9ba6058c55b7c291ccdf9cd445655de93d3a3dfc0fdd8b08f654170413906dce",
		What: "Vidur operator times, CodeLlama-34B on A100"},
	{Path: "profiles/vidur/a40/meta-llama/Llama-2-7b-hf/mlp.csv", URL: vidur + "profiling/compute/a40/meta-llama/Llama-2-7b-hf/mlp.csv",
		Size: 689225, SHA256: "f8d0f455d0b72b7975be0ed8e1951dcbf2eabc083001b27f6ef8203c0a96962c",
		What: "Vidur operator times, Llama-2-7B on A40"},
	{Path: "profiles/vidur/a40/codellama/CodeLlama-34b-Instruct-hf/mlp.csv",
		URL:  vidur + "profiling/compute/a40/codellama/CodeLlama-34b-Instruct-hf/mlp.csv",
		Size: 678375, SHA256: "0e9b6468d8fb2d25c55c5d142b5314bb6ae56b6b2991f2de555cb8857389f480",
		What: "Vidur operator times, CodeLlama-34B on A40"},
	{Path: "eval/wiki.test.raw",
		URL:  "https://huggingface.co/datasets/ikawrakow/validation-datasets-for-llama.cpp/resolve/main/wiki.test.raw.gz",
		Gzip: true, Size: 1290590, SHA256: "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08",
		What: "WikiText-2 raw test set (fetched gzipped)"},
	{Path: "eval/prompts/mt_bench_question.jsonl", URL: fastchat + "mt_bench/question.jsonl", Size: 48929,
		SHA256: "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7",
		What:   "MT-Bench questions"},
	{Path: "eval/prompts/vicuna_bench_question.jsonl", URL: fastchat + "vicuna_bench/question.jsonl", Size: 13125,
		SHA256: "c248c5c98ba45bb0c2aadae2f270e643bd32679c6c306a3b2a503ac4254cdaa5",
		What:   "Vicuna bench questions"},
	{Path: "eval/prompts/llamacpp_LLM-questions.txt", URL: llamacpp + "LLM-questions.txt", Size: 2598,
		SHA256: "3c6ccd08307944812f4efb8dfb12c16f4d5f1999da2a7c8a91237e5f3c6849f0",
		What:   "llama.cpp's short LLM questions"},
	{Path: "eval/prompts/llamacpp_parallel-questions.txt", URL: llamacpp + "parallel-questions.txt", Size: 1716,
		SHA256: "e969e6f06e75c5d4cc7415203895461eefc5b1a15250e96eb011ebfa2b87757a",
		What:   "llama.cpp's parallel-example questions"},
}
