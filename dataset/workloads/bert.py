"""Small BERT sentiment classifiers as the originals ran them (IDs 26-32, TensorFlow's text-classification
tutorial): BERT encoders of 2 or 4 layers and hidden size 128-768 (the 'small BERTs'; 64 dimensions per head,
feed-forward 4x hidden), built by transformers from a config with random weights, a two-class head, AdamW at
3e-5, on IMDB-like reviews: 128 WordPiece ids ([CLS] ... [SEP], padded) and a label."""

from __future__ import annotations

import re

import torch

from .common import Run, Synthetic, loader, train

SEQUENCE, VOCABULARY, CLS, SEP, FIRST_WORD = 128, 30522, 101, 102, 1996  # bert-base-uncased's ids
MODELS = (
    "bert-L2-H128",
    "bert-L2-H256",
    "bert-L2-H512",
    "bert-L2-H768",
    "bert-L4-H128",
    "bert-L4-H256",
    "bert-L4-H512",
)


def config(model: str):
    from transformers import BertConfig  # the dataset extra; imported here so the other workloads need no transformers

    layers, hidden = map(int, re.fullmatch(r"bert-L(\d+)-H(\d+)", model).groups())
    return BertConfig(
        vocab_size=VOCABULARY,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        intermediate_size=4 * hidden,
        max_position_embeddings=512,
        num_labels=2,
    )


def imdb_like(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids, attention mask and label of one review; IMDB reviews mostly fill 128 tokens, some are shorter."""
    length = min(SEQUENCE, int(torch.randint(40, 400, (), generator=generator)))
    ids = torch.zeros(SEQUENCE, dtype=torch.long)
    ids[:length] = torch.randint(FIRST_WORD, VOCABULARY, (length,), generator=generator)
    ids[0], ids[length - 1] = CLS, SEP
    mask = (torch.arange(SEQUENCE) < length).long()
    return ids, mask, torch.randint(0, 2, (), generator=generator)


def run(settings: Run) -> int:
    from transformers import BertForSequenceClassification

    model = BertForSequenceClassification(config(settings.model)).to(settings.device)
    data = loader(Synthetic(settings.steps * settings.batch_size, settings.seed, imdb_like), settings)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5)

    def loss_of(m, batch):
        ids, mask, labels = batch
        return m(input_ids=ids, attention_mask=mask, labels=labels).loss

    return train(settings, model, data, loss_of, optimizer)
