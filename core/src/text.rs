//! Texts → token ids with a Hugging Face tokenizer (`tokenizer.json`, read by the
//! `tokenizers` crate, the library `transformers` tokenizers run on): truncated and
//! padded to `max-length` as `tokenizer(texts, truncation=True, padding="max_length",
//! max_length=…)` does, on the side `padding-side` says. No libtorch.

use manifests::{PaddingSide, TextSpec};
use std::path::Path;
use tokenizers::{PaddingDirection, PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// Padding tokens looked for when the tokenizer's file sets no padding.
const PAD_TOKENS: &[&str] = &["[PAD]", "<pad>", "<|pad|>", "<PAD>"];

/// Why a tokenizer cannot serve `data.text`.
#[derive(Debug, Clone, PartialEq)]
pub enum TokenizerError {
    /// The file is not a tokenizer (or cannot be read).
    NotATokenizer(String),
    /// It names no padding token.
    NoPadding(String),
    /// `max-length` leaves no room beside the special tokens it adds.
    TooShort { length: usize, specials: usize },
}

/// A tokenizer ready for `spec`: truncating and padding to its length.
pub struct TextTokenizer {
    tokenizer: Tokenizer,
    spec: TextSpec,
}

impl TextTokenizer {
    /// Reads the tokenizer at `path`; an error says why it is not one, or why it cannot
    /// pad to `spec.max_length`.
    pub fn open(path: &Path, spec: &TextSpec) -> Result<TextTokenizer, TokenizerError> {
        let not_one = TokenizerError::NotATokenizer;
        let text = std::fs::read_to_string(path).map_err(|e| not_one(e.to_string()))?;
        let mut tokenizer: Tokenizer = text
            .parse()
            .map_err(|e| not_one(format!("not a Hugging Face tokenizer.json: {e}")))?;
        let (pad_id, pad_token) = match tokenizer.get_padding() {
            Some(p) => (p.pad_id, p.pad_token.clone()),
            None => PAD_TOKENS
                .iter()
                .find_map(|t| Some((tokenizer.token_to_id(t)?, t.to_string())))
                .ok_or_else(|| {
                    TokenizerError::NoPadding(format!(
                        "the tokenizer has no padding token: it sets no padding and has none of {}",
                        PAD_TOKENS.join(", ")
                    ))
                })?,
        };
        let length = spec.max_length as usize;
        let specials = tokenizer
            .encode("", spec.add_special_tokens)
            .map_err(|e| not_one(e.to_string()))?
            .len();
        if specials >= length {
            return Err(TokenizerError::TooShort { length, specials });
        }
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: length,
                ..TruncationParams::default()
            }))
            .map_err(|e| not_one(e.to_string()))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::Fixed(length),
            direction: match spec.padding_side {
                PaddingSide::Right => PaddingDirection::Right,
                PaddingSide::Left => PaddingDirection::Left,
            },
            pad_id,
            pad_token,
            ..PaddingParams::default()
        }));
        Ok(TextTokenizer {
            tokenizer,
            spec: spec.clone(),
        })
    }

    /// The token ids of `texts`, `max-length` per text, row after row, and their
    /// attention mask (1 for a token, 0 for padding).
    pub fn encode(&self, texts: Vec<&str>) -> Result<(Vec<u32>, Vec<u32>), String> {
        let encodings = self
            .tokenizer
            .encode_batch(texts, self.spec.add_special_tokens)
            .map_err(|e| e.to_string())?;
        let ids = encodings
            .iter()
            .flat_map(|e| e.get_ids().iter().copied())
            .collect();
        let mask = encodings
            .iter()
            .flat_map(|e| e.get_attention_mask().iter().copied())
            .collect();
        Ok((ids, mask))
    }

    /// The number of token ids the tokenizer knows (the `embedding` layer's size).
    pub fn vocabulary(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }
}
