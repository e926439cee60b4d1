#!/usr/bin/env python3
"""
dev/chat_fixtures.py — what transformers' apply_chat_template and `tokenizers` make of a set of
conversations, for every chat template chat.h recognises (test/fixtures/chat/*.jinja), for the C
test chat_templates_vs_transformers (test/test_chat.h).

No real tokenizer can be downloaded here, so for each template's family a small byte-level BPE is
trained with `tokenizers` under the real files' pipeline (the patterns of dev/hf_tokenizer_fixtures.py)
and the special tokens the template writes:

  qwen2.5             NFC + Split(Qwen2) + ByteLevel; <|endoftext|> <|im_start|> <|im_end|>
  smollm2             Digits(individual) + ByteLevel(use_regex); <|endoftext|> <|im_start|> <|im_end|>
  llama3, 3.1, 3.2    Split(Llama 3) + ByteLevel, ignore_merges, TemplateProcessing BOS;
                      <|begin_of_text|> <|end_of_text|> <|start_header_id|> <|end_header_id|> <|eot_id|>
  qwen3, qwen3-first  Qwen2.5's, and <think> </think> as added tokens that are not special (as Qwen3's)
and a SentencePiece-style BPE (byte_fallback, <unk>; normalizer Prepend("▁") + Replace(" " -> "▁"),
the legacy pipeline of Mistral's, Llama 2's and Phi-3's files; TemplateProcessing "<s> $A") with
  mistral, mistral-v0.3  <unk> <s> </s> [INST] [/INST] (as Mistral v0.3's file: control tokens)
  mixtral, llama2        <unk> <s> </s> ([INST] is text, as in Mistral v0.1's, Mixtral's and Llama 2's files)
  phi-3                  <unk> <s> </s> <|endoftext|>, and <|assistant|> <|end|> <|system|> <|user|>
                         with rstrip (they take the whitespace after them, as Phi-3's file has them)

    $ZT_HF_PYTHON dev/chat_fixtures.py --out DIR [--T 160] [--date 2026-02-03]

writes DIR/conversations.jsonl (the same lines for every template: "messages" and prompt/completion
message lists, with and without system prompts) and, for each template NAME, DIR/NAME/ with
tokenizer.json, tokenizer_config.json (chat_template = the committed text, read back and checked
against transformers' own), conversations.jsonl (the lines the template renders; Mistral's refuse
some), refused.json (the others: "line", and "error", the template's raise_exception message) and
expected.json: per line of DIR/NAME/conversations.jsonl
  rendered  apply_chat_template(messages, tokenize=False) — for prompt/completion: prompt + completion,
            as TRL renders them — with date_string = --date as "%d %b %Y" (Llama 3.1/3.2)
  ids, mask the example as -tokenize must pack it for T: `tokenizers`' ids of the rendering
            (add_special_tokens=False: apply_chat_template(tokenize=True) gives the same, checked),
            whole turns dropped from the start while it is longer than T - 1 tokens, its first id
            dropped when it is the document token; mask 1 on the tokens whose offsets overlap a
            counted assistant content (as rendered) and on the end-of-turn token right after one
  cut       whether turns were dropped
  prompt_rendered, prompt_ids
            -prompt's rendering and ids (chat_encode_prompt): the messages without their closing
            assistant messages, apply_chat_template(add_generation_prompt=True), tokenize False / True
With --models, also a tiny random model beside the llama3.2 and qwen2.5 tokenizers (LlamaForCausalLM,
Qwen2ForCausalLM; F32, config.json + model.safetensors + generation_config.json) and what
transformers' greedy generate makes of -prompt's four cases (the C test chat_prompt_vs_generate):
DIR/NAME/prompts_chat.jsonl (a text, a "messages" list: -chat-prompt auto renders them with the
template), DIR/NAME/prompts_text.jsonl (-chat-prompt 0: the first prompt's rendering as a string —
taken as is, Llama's BOS not doubled — and a plain text, encoded after the document token), and
DIR/NAME/generate.json: per prompt, "prompt" (what the C program prints as the prompt, hex), "reply"
(the tokens before the stop, hex of their bytes with tokenizer_print's filter) and "end" (the stop
token's bytes, or "-g N tokens", hex); "ids" and "generated" for the reader. The stops: the document token, the template's end of turn and one
token X the free-running reply reaches (generation_config.json's eos_token_id [end of turn, X]).
Exit 0, or 1 with a message; 3 when this python lacks transformers >= 4.47, jinja2 or tokenizers.
"""

import argparse
import datetime
import json
import os
import sys

try:
    import jinja2  # apply_chat_template needs it; its TemplateError is what raise_exception raises
    import tokenizers
    import transformers
    from tokenizers import Tokenizer, Regex, models, pre_tokenizers, trainers, decoders, normalizers, processors
    from transformers import AutoTokenizer
except ImportError as e:
    print(f"chat_fixtures: needs transformers >= 4.47, jinja2 and tokenizers: {e}", file=sys.stderr)
    sys.exit(3)
if tuple(int(x) for x in transformers.__version__.split(".")[:2]) < (4, 47):
    print(f"chat_fixtures: needs transformers >= 4.47 (this is {transformers.__version__})", file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_tokenizer_fixtures import LLAMA3_RE, QWEN2_RE  # noqa: E402  (one copy of each pattern)

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = {  # name -> (family, end of turn)
    "qwen2.5": ("qwen2", "<|im_end|>"),
    "smollm2": ("smollm2", "<|im_end|>"),
    "llama3": ("llama3", "<|eot_id|>"),
    "llama3.1": ("llama3", "<|eot_id|>"),
    "llama3.2": ("llama3", "<|eot_id|>"),
    "qwen3": ("qwen3", "<|im_end|>"),
    "qwen3-first": ("qwen3", "<|im_end|>"),
    "mistral": ("mistral", "</s>"),
    "mistral-v0.3": ("mistral", "</s>"),
    "mixtral": ("sp_plain", "</s>"),
    "llama2": ("sp_plain", "</s>"),
    "phi-3": ("phi3", "<|end|>"),
}
SP_FAMILIES = ("mistral", "sp_plain", "phi3")

S, U, A = "system", "user", "assistant"


def m(role, content):
    return {"role": role, "content": content}


LONG = " ".join(f"step {i}: mix the flour, the water and the salt" for i in range(12))
MID = " ".join(f"point {i}: the water" for i in range(6))
CONVERSATIONS = [
    {"messages": [m(U, "What is 2+2?"), m(A, "4.")]},
    {"messages": [m(S, "You are terse."), m(U, "Name a colour."), m(A, "Blue."), m(U, "Another?"), m(A, "Green.")]},
    {"messages": [m(U, "  Leading and trailing spaces  "), m(A, "\n\n  An answer that starts with newlines.\n\n"),
                  m(U, "tabs\tand\u00a0nbsp\u3000"), m(A, "\u2003wide space around\u2003")]},
    {"prompt": [m(S, "  Answer in French. "), m(U, "Hello")], "completion": [m(A, "Bonjour !")]},
    {"prompt": [m(U, "Count:"), m(A, "1 2 3"), m(U, "Go on")], "completion": [m(A, "4 5 6")]},
    {"messages": [m(U, "Caf\u0065\u0301 or caf\u00e9? \u1100\u1161 \U0001F469\u200D\U0001F4BB"), m(A, "Both: e\u0301 and \u00e9 (NFC).")]},
    {"messages": [m(U, "Numbers 1234567 and 3.14159"), m(A, "12345 + 67 = 12412")]},
    {"messages": [m(S, "System first."), m(U, "Hi"), m(A, ""), m(S, "A second system message."), m(U, "Again"), m(A, "  ok  ")]},
    {"messages": [m(U, "Quote: <|im_start|> is text here? {{ not jinja }} {% raw %}"), m(A, "It's a 'quote' \"here\" \\ backslash.")]},
    {"messages": [m(S, "Keep me."), m(U, "Recipe one? " + LONG), m(A, "Here: " + LONG), m(U, "Recipe two? " + LONG),
                  m(A, "Again: " + LONG), m(U, "Shorter?"), m(A, "Flour, water, salt.")]},
    {"messages": [m(S, "Three turns; the first one goes."), m(U, "One? " + MID), m(A, "One: " + MID), m(U, "Two? " + MID),
                  m(A, "Two: " + MID), m(U, "Three?"), m(A, "Three.")]},
    {"messages": [m(U if i % 2 == 0 else A, f"turn {i // 2}: " + " ".join(["water"] * (3 + i % 5))) for i in range(24)]},
    {"messages": [m(U, "Old question " + LONG), m(A, "Old answer " + LONG), m(U, "New question"), m(A, "New answer.")]},
    # reasoning in the content (Qwen3's template splits it at </think>; the others write it as text)
    {"messages": [m(U, "Think first: 3*3?"), m(A, "<think>\nthree threes\nnine\n</think>\n\nNine.")]},
    {"messages": [m(S, "Be brief."), m(U, "q1"), m(A, "<think>r1</think>a1"), m(U, "q2"), m(A, "\n<think>\n\nr2\n\n</think>\n\n\na2 \n")]},
    {"messages": [m(U, "Look it up."), m(A, "Calling."), m(U, "<tool_response>\n42\n</tool_response>"), m(A, "<think>x</think>It is 42."),
                  m(A, "No reasoning here.")]},
    {"prompt": [m(U, "Why?")], "completion": [m(A, "<think>because\n</think>Because.")]},
    # "▁" as text (a SentencePiece tokenizer's space mark), whitespace-only and empty answers, a
    # system prompt before one question (Mistral v0.3 writes it only into a last user message)
    {"messages": [m(U, "Spaces \u2581 as text: \u2581\u2581x "), m(A, " \u2581ok\u2581 "), m(U, "\n\n"), m(A, " \t ")]},
    {"prompt": [m(S, "Reply in one word."), m(U, "Colour of the sky?")], "completion": [m(A, " Blue")]},
    # a system message in the middle, then two user messages: Mistral's templates refuse it, each at its own check
    {"messages": [m(U, "a"), m(S, "b"), m(U, "c"), m(U, "d"), m(A, "e")]},
    {"messages": [m(U, "q1"), m(S, "Llama 2 writes this nowhere."), m(U, "q2"), m(A, "a2")]},
]


def corpus():
    texts = []
    for c in CONVERSATIONS:
        for msg in c.get("messages", []) + c.get("prompt", []) + c.get("completion", []):
            texts.append(msg["content"])
    texts += ["The quick brown fox jumps over the lazy dog. " * 3, "system user assistant " * 5,
              "Cutting Knowledge Date: December 2023 Today Date: 03 Feb 2026", LONG] * 4
    return texts


def train_sp(family):
    """A SentencePiece-style BPE under the legacy pipeline, with the family's added tokens (see above)."""
    texts = corpus()
    alphabet = sorted(set("".join(texts)) - {" "}) + ["\u2581"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tr = trainers.BpeTrainer(vocab_size=3 + 256 + len(alphabet) + 40, special_tokens=["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)],
                             initial_alphabet=alphabet, limit_alphabet=len(alphabet), show_progress=False)
    tok.train_from_iterator(texts, tr)
    j = json.loads(tok.to_str())  # the <0xXX> tokens: in model.vocab only, as the real files have them
    j["added_tokens"] = [t for t in j["added_tokens"] if not t["content"].startswith("<0x")]
    tok = Tokenizer.from_str(json.dumps(j, ensure_ascii=False))
    if family == "sp_plain":
        pass
    elif family == "mistral":
        tok.add_special_tokens([tokenizers.AddedToken(x, normalized=False, special=True) for x in ["[INST]", "[/INST]"]])
    else:
        tok.add_special_tokens([tokenizers.AddedToken("<|endoftext|>", normalized=False, special=True)] +
                               [tokenizers.AddedToken(x, rstrip=True, normalized=False, special=True) for x in ["<|assistant|>", "<|end|>", "<|system|>", "<|user|>"]])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", bos)])
    return tok


def train(family):
    if family in SP_FAMILIES:
        return train_sp(family)
    tok = Tokenizer(models.BPE(ignore_merges=(family == "llama3")))
    if family == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    elif family in ("qwen2", "qwen3"):
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, show_progress=False, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)
    if family == "qwen3":  # Qwen3's tokenizer.json: <think> and </think> added, not special (matched in any text)
        tok.add_tokens([tokenizers.AddedToken("<think>", special=False, normalized=False), tokenizers.AddedToken("</think>", special=False, normalized=False)])
    if family == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def spans(name, rendered, msgs, date):
    """Where each message's content landed in the rendering: found through the template's own
    delimiters, in order (independent of chat.h's bookkeeping)."""
    family = TEMPLATES[name][0]
    out, at = [], 0
    if family == "qwen3":  # what follows each header up to its <|im_end|> (the assistant's think block included: the model writes it)
        for i, msg in enumerate(msgs):
            before = f"<|im_start|>{msg['role']}\n"
            k = rendered.find(before, at)
            e = rendered.find("<|im_end|>\n", k + len(before)) if k >= 0 else -1
            if e < 0:
                raise SystemExit(f"chat_fixtures: {name}: message {i} not found in the rendering")
            out.append((k + len(before), e))
            at = e
        return out
    if family in SP_FAMILIES:
        sys_last = name == "mistral-v0.3" and msgs[0]["role"] == S and msgs[-1]["role"] == U
        for i, msg in enumerate(msgs):
            if name == "llama2" and (msg["role"] == S or (i == 1 and msgs[0]["role"] == S)):  # the first user block holds the system message
                if msg["role"] == S and i > 0:  # a later one is written nowhere
                    out.append((at, at))
                    continue
                prefix = "<<SYS>>\n" + msgs[0]["content"] + "\n<</SYS>>\n\n"
                whole = (prefix + msgs[1]["content"]).strip()
                k = rendered.find("[INST] " + whole + " [/INST]", at)
                if k < 0:
                    raise SystemExit(f"chat_fixtures: {name}: message {i} not found in the rendering")
                if i == 0:
                    out.append((k + 7 + 8, k + 7 + 8 + len(msg["content"])))
                    continue
                out.append((k + 7 + min(len(prefix), len(whole)), k + 7 + len(whole)))
                at = k + 7 + len(whole)
                continue
            if name == "mixtral" and i == 0 and msg["role"] == S:  # written into the first user message (found with it: `at` stays)
                k = rendered.find(" [INST] " + msg["content"] + "\n\n")
                if k < 0:
                    raise SystemExit(f"chat_fixtures: {name}: message {i} not found in the rendering")
                out.append((k + 8, k + 8 + len(msg["content"])))
                continue
            elif name == "mistral-v0.3" and i == 0 and msg["role"] == S:  # written into the last user message, or nowhere
                if not sys_last:
                    out.append((0, 0))
                    continue
                before, after, content = "[INST] ", "\n\n" + msgs[-1]["content"] + "[/INST]", msg["content"]
                k = rendered.rfind(before + content + after)
            else:
                content = msg["content"].strip() if (name == "mistral-v0.3" and msg["role"] == A) else msg["content"]
                if family == "phi3":
                    before, after = f"<|{msg['role']}|>\n", "<|end|>\n"
                elif name == "llama2":
                    content = msg["content"].strip()
                    before, after = ("[INST] ", " [/INST]") if msg["role"] == U else (" ", " </s>")
                elif name == "mixtral":
                    first_user = i == 1 and msgs[0]["role"] == S
                    before = " [INST] " + (msgs[0]["content"] + "\n\n" if first_user else "") if msg["role"] == U else " "
                    after = " [/INST]" if msg["role"] == U else "</s>"
                elif msg["role"] == U:
                    before = "[INST] " + (msgs[0]["content"] + "\n\n" if sys_last and i == len(msgs) - 1 else "")
                    after = " [/INST]" if name == "mistral" else "[/INST]"
                else:
                    before, after = ("[/INST]" if name == "mistral" else "[/INST] "), "</s>"
                k = rendered.find(before + content + after, at)
            if k < 0:
                raise SystemExit(f"chat_fixtures: {name}: message {i} not found in the rendering")
            a = k + len(before)
            b = a + len(content) + (1 if name == "llama2" and msg["role"] == A else 0)  # Llama 2: the space before </s> is the answer's
            out.append((a, b))
            at = max(at, b)
        return out
    for i, msg in enumerate(msgs):
        content = msg["content"] if family != "llama3" else msg["content"].strip()
        if family != "llama3":
            before, after = f"<|im_start|>{msg['role']}\n", "<|im_end|>\n"
        elif name != "llama3" and i == 0 and msg["role"] == S:
            before, after = f"Today Date: {date}\n\n", "<|eot_id|>"
        else:
            before, after = f"<|start_header_id|>{msg['role']}<|end_header_id|>\n\n", "<|eot_id|>"
        k = rendered.find(before + content + after, at)
        if k < 0:
            raise SystemExit(f"chat_fixtures: {name}: message {i} not found in the rendering")
        a = k + len(before)
        out.append((a, a + len(content)))
        at = a + len(content)
    return out


def expected(name, hf, fast, line, T, date, doc_id, eot_id):
    if "messages" in line:
        msgs = line["messages"]
        counted = [x["role"] == A for x in msgs]
    else:
        msgs = line["prompt"] + line["completion"]
        counted = [False] * len(line["prompt"]) + [True] * len(line["completion"])
    kw = {"date_string": date} if name in ("llama3.1", "llama3.2") else {}
    full = hf.apply_chat_template(msgs, tokenize=False, **kw)
    sys_first = msgs[0]["role"] == S
    start, cut = int(sys_first), False
    while True:
        sel = ([msgs[0]] if sys_first else []) + msgs[start:]
        cnt = ([counted[0]] if sys_first else []) + counted[start:]
        rendered = hf.apply_chat_template(sel, tokenize=False, **kw)
        enc = fast.encode(rendered, add_special_tokens=False)
        ids = enc.ids
        if hf.apply_chat_template(sel, tokenize=True, **kw) != ids:
            raise SystemExit(f"chat_fixtures: {name}: apply_chat_template(tokenize=True) and tokenizers disagree")
        skip = 1 if ids and ids[0] == doc_id else 0
        if len(ids) - skip + 1 <= T:
            break
        nxt = start + 1
        while nxt < len(msgs) and msgs[nxt]["role"] != U:
            nxt += 1
        if nxt >= len(msgs):
            raise SystemExit(f"chat_fixtures: {name}: a conversation's last turn is longer than T = {T}")
        start, cut = nxt, True
    sp = spans(name, rendered, sel, date)
    mask = []
    for tid, (s, e) in zip(ids, enc.offsets):
        c = any(cnt[k] and ((s < b and e > a) or (tid == eot_id and s == b)) for k, (a, b) in enumerate(sp))
        mask.append(1 if c else 0)
    row = {"rendered": full, "ids": ids[skip:], "mask": mask[skip:], "cut": cut, "kept": len(sel)}
    pm = list(msgs)  # -prompt: the conversation without its closing assistant messages, add_generation_prompt=True
    while pm and pm[-1]["role"] == A:
        pm.pop()
    row["prompt_rendered"] = hf.apply_chat_template(pm, tokenize=False, add_generation_prompt=True, **kw)
    row["prompt_ids"] = hf.apply_chat_template(pm, tokenize=True, add_generation_prompt=True, **kw)
    if kw:  # the template's own date: 3.1's fixed default, 3.2's strftime_now (run with TZ=UTC: chat.h's today)
        row["rendered_default"] = hf.apply_chat_template(msgs, tokenize=False)
    return row


def printed(fast, ids):
    """The bytes tokenizer_print writes for ids: each token's bytes (an added token's content; the
    byte-level alphabet mapped back), control bytes other than whitespace left out."""
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode
    back = {c: b for b, c in bytes_to_unicode().items()}
    added = {i: t.content for i, t in fast.get_added_tokens_decoder().items()}
    out = bytearray()
    for i in ids:
        bs = added[i].encode() if i in added else bytes(back[c] for c in fast.id_to_token(i))
        out += bytes(c for c in bs if 0x20 <= c < 0x7F or c in b"\t\n\v\f\r" or c >= 0x80)
    return bytes(out)


def chat_model(d, name, hf, fast, date, doc_id, eot_id, gen):
    """A tiny random model for this tokenizer, saved in d, and transformers' greedy replies to -prompt's cases."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig, Qwen2Config
    torch.manual_seed(20261203)
    kw = dict(vocab_size=fast.get_vocab_size(), hidden_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=96, max_position_embeddings=256, initializer_range=0.3, tie_word_embeddings=False)
    llama = name.startswith("llama")
    cfg = LlamaConfig(**kw, bos_token_id=doc_id, eos_token_id=eot_id) if llama else Qwen2Config(**kw, eos_token_id=eot_id)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32).eval()
    import transformers.generation.utils as gu  # Debian's torch 1.13 cannot import torch.distributed.fsdp on Python 3.11: generate's
    gu.is_fsdp_managed_module = lambda module: False  # FSDP check imports it; no module here is FSDP's
    kwd = {"date_string": date} if llama else {}
    user = [m(U, "Name a colour.")]
    convo = [m(S, "Answer in one word."), m(U, "What is 2+2?")]
    chat_ids = [hf.apply_chat_template(x, tokenize=True, add_generation_prompt=True, **kwd) for x in (user, convo)]
    rendered = hf.apply_chat_template(user, tokenize=False, add_generation_prompt=True, **kwd)
    plain = "In the beginning"
    enc = lambda t: fast.encode(t, add_special_tokens=False).ids  # noqa: E731  (special tokens matched)
    r_ids = enc(rendered)
    text_ids = [r_ids if r_ids[0] == doc_id else [doc_id] + r_ids, [doc_id] + enc(plain)]

    def greedy(ids, stops):
        with torch.no_grad():
            t = torch.tensor([ids])
            out = model.generate(t, attention_mask=torch.ones_like(t), max_new_tokens=gen, do_sample=False, eos_token_id=stops, pad_token_id=doc_id)
        return out[0, len(ids):].tolist()
    free = greedy(chat_ids[0], [doc_id, eot_id])  # the stop X: a token the first reply reaches, not before its fifth, printable if one is
    seen = set(free[:4]) | {doc_id, eot_id}
    later = [t for t in free[4:] if t not in seen]
    x = next((t for t in later if printed(fast, [t]).strip() and all(0x20 <= c < 0x7F for c in printed(fast, [t]))), later[0] if later else fast.get_vocab_size() - 1)
    stops = [doc_id, eot_id, x]
    model.save_pretrained(d, safe_serialization=True)
    GenerationConfig(bos_token_id=cfg.bos_token_id, eos_token_id=[eot_id, x], pad_token_id=None).save_pretrained(d)
    cases = []
    for ids, skip in [(chat_ids[0], 0), (chat_ids[1], 0), (text_ids[0], 0 if r_ids[0] == doc_id else 1), (text_ids[1], 1)]:
        reply = greedy(ids, stops)
        stopped = reply and reply[-1] in stops
        body = reply[:-1] if stopped else reply
        cases.append({"prompt": printed(fast, ids[skip:]).hex(), "reply": printed(fast, body).hex(),
                      "end": printed(fast, reply[-1:]).hex() if stopped else f"-g {gen} tokens".encode().hex(), "ids": ids, "generated": reply})
    with open(os.path.join(d, "prompts_chat.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps(user[0]["content"]) + "\n" + json.dumps({"messages": convo}) + "\n")
    with open(os.path.join(d, "prompts_text.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps(rendered) + "\n" + json.dumps(plain) + "\n")
    with open(os.path.join(d, "generate.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f)
    print(f"{name}: a tiny {cfg.model_type} (V {cfg.vocab_size}); greedy replies of {[len(bytes.fromhex(c['reply'])) for c in cases]} bytes, "
          f"ends {[bytes.fromhex(c['end']).decode('utf-8', 'replace') for c in cases]}")


def main():
    ap = argparse.ArgumentParser(description="Chat template renderings and ids from transformers and tokenizers.")
    ap.add_argument("--out", required=True)
    ap.add_argument("--T", type=int, default=160)
    ap.add_argument("--date", default="2026-02-03", help="-chat-date (YYYY-MM-DD) for Llama 3.1/3.2")
    ap.add_argument("--models", action="store_true", help="also a tiny model per family and transformers' greedy generate")
    ap.add_argument("--gen", type=int, default=12, help="with --models: -g, the most tokens a reply has")
    args = ap.parse_args()
    date = datetime.date.fromisoformat(args.date).strftime("%d %b %Y")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "conversations.jsonl"), "w", encoding="utf-8") as f:
        for c in CONVERSATIONS:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    trained = {}
    for name, (family, eot) in TEMPLATES.items():
        if family not in trained:
            trained[family] = train(family)
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        trained[family].save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(HERE, "..", "test", "fixtures", "chat", name + ".jinja"), encoding="utf-8") as f:
            template = f.read()
        llama = family == "llama3"
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096, "chat_template": template,
               "bos_token": "<|begin_of_text|>" if llama else ("<|im_start|>" if name == "smollm2" else "<s>" if family in SP_FAMILIES else None),
               "eos_token": "<|endoftext|>" if family == "phi3" else eot, "clean_up_tokenization_spaces": False}
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False, indent=2)
        hf = AutoTokenizer.from_pretrained(d)
        if hf.chat_template != template:
            raise SystemExit(f"chat_fixtures: {name}: transformers read another template back")
        fast = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        doc_id = fast.token_to_id("<|begin_of_text|>" if llama else "<s>" if family in SP_FAMILIES else "<|endoftext|>")
        ok, refused = [], []
        for c in CONVERSATIONS:  # Mistral's templates raise_exception on some
            try:
                hf.apply_chat_template(c.get("messages") or c["prompt"] + c["completion"], tokenize=False)
                ok.append(c)
            except jinja2.exceptions.TemplateError as e:
                refused.append({"line": c, "error": str(e)})
        with open(os.path.join(d, "conversations.jsonl"), "w", encoding="utf-8") as f:
            for c in ok:
                f.write(json.dumps(c, ensure_ascii=False) + "\n")
        with open(os.path.join(d, "refused.json"), "w", encoding="utf-8") as f:
            json.dump(refused, f, ensure_ascii=False)
        rows = [expected(name, hf, fast, c, args.T, date, doc_id, fast.token_to_id(eot)) for c in ok]
        with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
            json.dump(rows, f, ensure_ascii=False)
        if args.models and name in ("llama3.2", "qwen2.5"):
            chat_model(d, name, hf, fast, date, doc_id, fast.token_to_id(eot), args.gen)
        print(f"{name}: {len(rows)} conversations ({len(refused)} refused), {sum(len(r['ids']) for r in rows)} ids, {sum(map(sum, (r['mask'] for r in rows)))} counted, "
              f"{sum(r['cut'] for r in rows)} cut at T = {args.T} (messages kept: {[r['kept'] for r in rows if r['cut']]})")
    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}")


if __name__ == "__main__":
    main()
