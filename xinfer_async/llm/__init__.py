"""The LLM on the runtime: GGUF decoder models (llama, qwen2, qwen3, gemma3, phi3), tokenizer, sampling, concurrent generation."""

from ._engine import LanguageModel as LanguageModel
from ._request import Timings as Timings
from ._stream import CompletionResult as CompletionResult, GenerationStream as GenerationStream
from ._gguf import GGUFModel as GGUFModel, LlamaConfig as LlamaConfig, load_gguf as load_gguf
from ._load import DEFAULT_MODEL as DEFAULT_MODEL, load as load, open_model as open_model
from ._registry import cache_dir as cache_dir, pull as pull, resolve_model as resolve_model
from ._sampling import Sampler as Sampler, SamplingParams as SamplingParams, TokenLogprobs as TokenLogprobs
from ._tokenizer import StreamDecoder as StreamDecoder, Tokenizer as Tokenizer
