// typeflow::text: tokenizers that turn text into the token ids a language
// model trains on (data::lm_windows cuts them into examples), and back.
//
//   char_tokenizer   the distinct bytes of a training text (nanoGPT's shakespeare_char)
//   byte_tokenizer   all 256 bytes, id = byte (data::text_file's ids)
//   gpt2_tokenizer   GPT-2's byte-level BPE, 50257 tokens (data/gpt2 from scripts/setup.sh)
#pragma once

#include "typeflow/text/char_tokenizer.hpp"
#include "typeflow/text/gpt2_tokenizer.hpp"
