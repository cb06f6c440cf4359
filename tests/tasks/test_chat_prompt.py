"""The chat path renders what the tokenizer's own chat template renders, token for token (issue #28, item 10).

Three small local tokenizers carry Llama-3-, Gemma- and Qwen-style Jinja templates (written here, no hub): the
Llama-3 and Gemma ones write bos in the template and also add it when encoding (as the real ones do), Qwen has
no bos. The prompt obliviate encodes must equal ``apply_chat_template(..., add_generation_prompt=True)``, and the
trained sequence (prompt + answer) the template's rendering of the whole conversation: no double bos, no space
before the answer, the template's end of turn where a plain prompt puts eos.
"""

import warnings

import pytest

from obliviate.data import encode_data
from obliviate.eval.core import choice_logprobs
from obliviate.models.tokenizer import adds_bos, bos_prefix
from obliviate.tasks import Data, PromptFormat

LLAMA3 = ("{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' "
          "+ m['content'] | trim + '<|eot_id|>' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
GEMMA = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}"
         "\n{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}"
         "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
QWEN = ("{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

STYLES = {
    "llama3": dict(template=LLAMA3, bos="<|begin_of_text|>", eos="<|end_of_text|>",
                   extra=["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], end="<|eot_id|>"),
    "gemma": dict(template=GEMMA, bos="<bos>", eos="<eos>", extra=["<start_of_turn>", "<end_of_turn>"],
                  end="<end_of_turn>\n"),
    "qwen": dict(template=QWEN, bos=None, eos="<|endoftext|>", extra=["<|im_start|>", "<|im_end|>"],
                 end="<|im_end|>\n"),
}
TEXTS = ["Who wrote the letters?\n\nMaria Lopez wrote them in Paris.", "system user assistant model helpful",
         "What is the capital?\nParis is the capital of France."] * 30


def chat_tokenizer(style: str):
    """A byte-level BPE with Llama-3's pre-tokenizer pattern, the style's special tokens and chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    s = STYLES[style]
    pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    specials = [x for x in ("<pad>", s["bos"], s["eos"], *s["extra"]) if x]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=400, special_tokens=specials, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if s["bos"]:
        tok.post_processor = processors.TemplateProcessing(single=f"{s['bos']} $A", pair=f"{s['bos']} $A $B",
                                                           special_tokens=[(s["bos"], tok.token_to_id(s["bos"]))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token=s["bos"], eos_token=s["eos"],
                                   additional_special_tokens=s["extra"])
    fast.chat_template = s["template"]
    return fast


@pytest.mark.parametrize("style", sorted(STYLES))
def test_chat_sequence_is_the_templates_own(style):
    tok = chat_tokenizer(style)
    fmt = PromptFormat(chat=True)
    q, a = "Who wrote the letters?", "Maria Lopez"
    user = [{"role": "user", "content": q}]
    prompt_ids = tok.apply_chat_template(user, tokenize=True, add_generation_prompt=True)
    full_ids = tok.apply_chat_template(user + [{"role": "assistant", "content": a}], tokenize=True)
    prompt_ids = prompt_ids["input_ids"] if isinstance(prompt_ids, dict) or hasattr(prompt_ids, "keys") else prompt_ids
    full_ids = full_ids["input_ids"] if isinstance(full_ids, dict) or hasattr(full_ids, "keys") else full_ids

    assert fmt.turn_end(tok) == STYLES[style]["end"]
    seqs, masks, _ = encode_data(tok, Data(qa=[(q, a)]), fmt, max_len=512)
    ids, mask = seqs[0].tolist(), masks[0].tolist()
    assert ids == list(full_ids)  # token for token: one bos at most, no space before the answer, no eos
    n_prompt = mask.index(1)
    assert ids[:n_prompt] == list(prompt_ids)
    assert tok.decode(ids[n_prompt:]) == a + STYLES[style]["end"]  # the loss covers the answer and the turn end
    if STYLES[style]["bos"]:
        assert ids.count(tok.bos_token_id) == 1
    assert tok.eos_token_id not in ids


@pytest.mark.parametrize("style", sorted(STYLES))
def test_scored_chat_context_has_one_bos(style):
    tok = chat_tokenizer(style)
    prompt = PromptFormat(chat=True).prompt("Who wrote the letters?", tok)
    assert bos_prefix(tok, prompt) == []  # the template wrote bos (or there is none)
    from obliviate.models.builders import tiny_llama

    model = tiny_llama(len(tok), n_layer=1, d_model=16, n_head=2, seed=0).double()  # logits at one row vs all rows
    want = tok.apply_chat_template([{"role": "user", "content": "Who wrote the letters?"}], tokenize=True,
                                   add_generation_prompt=True)
    want = want["input_ids"] if hasattr(want, "keys") else want
    # one forward over the template's ids scores the same as choice_logprobs' own encoding of the rendered prompt
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(want)])).logits[0, -1].log_softmax(-1)
    letter = tok("Maria", add_special_tokens=False)["input_ids"]
    assert len(letter) == 1
    got = choice_logprobs(model, tok, [prompt], [["Maria"]])[0][0]
    assert got == pytest.approx(float(logits[letter[0]]), abs=1e-5)


def test_bos_follows_the_tokenizer(tiny_tokenizer):
    assert adds_bos(chat_tokenizer("llama3")) and adds_bos(chat_tokenizer("gemma"))
    assert not adds_bos(chat_tokenizer("qwen"))
    assert adds_bos(tiny_tokenizer)  # obliviate's own tokenizers: their models are trained with bos first
    gpt2_like = chat_tokenizer("qwen")
    gpt2_like.bos_token = "<|endoftext|>"  # GPT-2 / Pythia: bos = eos, the tokenizer adds none
    assert gpt2_like.bos_token_id is not None and not adds_bos(gpt2_like)
    seqs, _, _ = encode_data(gpt2_like, Data(qa=[("Who wrote the letters?", "Maria")]), max_len=64)
    assert seqs[0][0] != gpt2_like.bos_token_id
    seqs, _, _ = encode_data(tiny_tokenizer, Data(qa=[("Who?", "Maria")]), max_len=64)
    assert seqs[0][0] == tiny_tokenizer.bos_token_id


def test_plain_prompt_on_a_chat_tokenizer_warns_once():
    tok = chat_tokenizer("gemma")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for q in ("one?", "two?", "three?"):
            PromptFormat().prompt(q, tok)
    msgs = [str(w.message) for w in caught if "chat template" in str(w.message)]
    assert len(msgs) == 1 and "--chat-template" in msgs[0] and "\n" not in msgs[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PromptFormat(chat=True).prompt("one?", tok)  # no warning with the chat template
