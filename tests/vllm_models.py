"""Tiny local models for the real-vLLM test bed (no downloads).

Run with the vLLM venv's python (it has torch, transformers and tokenizers)::

    python tests/vllm_models.py OUTDIR

builds, deterministically, into OUTDIR:

- ``target/``: a random-weight ``LlamaForCausalLM`` (hidden 256, 2 layers, 4 heads / 2 KV heads,
  intermediate 512, bf16, ~3 M parameters) with a word-level ``PreTrainedTokenizerFast`` over a
  vocabulary of common English words generated here, a trivial chat template and a
  ``generation_config.json``. Served as the plain model, the target of every speculative config, and
  as its own draft (``{"method": "draft_model", "model": target}``: every draft token is accepted).
- ``draft-noisy/``: the target with Gaussian noise added to every weight matrix (std =
  ``NOISE_FACTOR`` times that matrix's own std), so that vLLM's draft acceptance rate
  (accepted / drafted tokens, ``num_speculative_tokens`` 3, greedy) is about 50%.

A stamp file (``STAMP_NAME``) is written last; a later run with the same ``BUILD_VERSION`` finds it and
skips the build. This module imports nothing heavy at import time, so the test suite can import it
from the project's own environment for ``model_paths`` / ``is_built`` without torch.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

# Bump when anything below changes what is written (weights, tokenizer, template, config).
BUILD_VERSION = "1"
STAMP_NAME = "specperf-models.json"
SEED = 1234
NOISE_SEED = 4321
# Draft noise: std = NOISE_FACTOR * std(W) for each weight matrix (1-D norm weights untouched).
# Calibrated against vLLM 0.32.0 on CPU (num_speculative_tokens 3, temperature 0): 50.5% draft acceptance
# (928 / 1836 draft tokens, mean acceptance length 2.52) over 24 requests of 64 tokens; 0.04 gives ~61%,
# 0.06 ~48% (transformers estimate).
NOISE_FACTOR = 0.05

TARGET = "target"
DRAFT_NOISY = "draft-noisy"

MODEL_SHAPE = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
}
VOCAB_SIZE = 4096

UNK, BOS, EOS, PAD = "[UNK]", "<s>", "</s>", "[PAD]"
SPECIALS = [UNK, BOS, EOS, PAD]
# Roles and content joined as plain text; "assistant:" opens the reply (no special tokens inside).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)

# Common English words; the vocabulary adds numbers, punctuation and inflected forms of these.
_WORDS = """
the of and to a in is it you that he was for on are with as i his they be at one have this from or
had by hot word but what some we can out other were all there when up use your how said an each she
which do their time if will way about many then them write would like so these her long make thing
see him two has look more day could go come did number sound no most people my over know water than
call first who may down side been now find any new work part take get place made live where after
back little only round man year came show every good me give our under name very through just form
sentence great think say help low line differ turn cause much mean before move right boy old too same
tell does set three want air well also play small end put home read hand port large spell add even
land here must big high such follow act why ask men change went light kind off need house picture try
us again animal point mother world near build self earth father head stand own page should country
found answer school grow study still learn plant cover food sun four between state keep eye never
last let thought city tree cross farm hard start might story saw far sea draw left late run don't
while press close night real life few north open seem together next white children begin got walk
example ease paper group always music those both mark often letter until mile river car feet care
second book carry took science eat room friend began idea fish mountain stop once base hear horse cut
sure watch color face wood main enough plain girl usual young ready above ever red list though feel
talk bird soon body dog family direct pose leave song measure door product black short numeral class
wind question happen complete ship area half rock order fire south problem piece told knew pass since
top whole king space heard best hour better true during hundred five remember step early hold west
ground interest reach fast verb sing listen six table travel less morning ten simple several vowel
toward war lay against pattern slow center love person money serve appear road map rain rule govern
pull cold notice voice unit power town fine certain fly fall lead cry dark machine note wait plan
figure star box noun field rest correct able pound done beauty drive stood contain front teach week
final gave green oh quick develop ocean warm free minute strong special mind behind clear tail produce
fact street inch multiply nothing course stay wheel full force blue object decide surface deep moon
island foot system busy test record boat common gold possible plane stead dry wonder laugh thousand
ago ran check game shape equate miss brought heat snow tire bring yes distant fill east paint language
among grand ball yet wave drop heart am present heavy dance engine position arm wide sail material
size vary settle speak weight general ice matter circle pair include divide syllable felt perhaps
pick sudden count square reason length represent art subject region energy hunt probable bed brother
egg ride cell believe fraction forest sit race window store summer train sleep prove lone leg exercise
wall catch mount wish sky board joy winter sat written wild instrument kept glass grass cow job edge
sign visit past soft fun bright gas weather month million bear finish happy hope flower clothe strange
gone jump baby eight village meet root buy raise solve metal whether push seven paragraph third shall
held hair describe cook floor either result burn hill safe cat century consider type law bit coast
copy phrase silent tall sand soil roll temperature finger industry value fight lie beat excite natural
view sense ear else quite broke case middle kill son lake moment scale loud spring observe child
straight consonant nation dictionary milk speed method organ pay age section dress cloud surprise
quiet stone tiny climb cool design poor lot experiment bottom key iron single stick flat twenty skin
smile crease hole trade melody trip office receive row mouth exact symbol die least trouble shout
except wrote seed tone join suggest clean break lady yard rise bad blow oil blood touch grew cent mix
team wire cost lost brown wear garden equal sent choose fell fit flow fair bank collect save control
decimal gentle woman captain practice separate difficult doctor please protect noon whose locate ring
character insect caught period indicate radio spoke atom human history effect electric expect crop
modern element hit student corner party supply bone rail imagine provide agree thus capital won't
chair danger fruit rich thick soldier process operate guess necessary sharp wing create neighbor wash
bat rather crowd corn compare poem string bell depend meat rub tube famous dollar stream fear sight
thin triangle planet hurry chief colony clock mine tie enter major fresh search send yellow gun allow
print dead spot desert suit current lift rose continue block chart hat sell success company subtract
event particular deal swim term opposite wife shoe shoulder spread arrange camp invent cotton born
determine quart nine truck noise level chance gather shop stretch throw shine property column molecule
select wrong gray repeat require broad prepare salt nose plural anger claim continent oxygen sugar
death pretty skill women season solution magnet silver thank branch match suffix especially fig afraid
huge sister steel discuss forward similar guide experience score apple bought led pitch coat mass card
band rope slip win dream evening condition feed tool total basic smell valley nor double seat arrive
master track parent shore division sheet substance favor connect post spend chord fat glad original
share station dad bread charge proper bar offer segment slave duck instant market degree populate chick
dear enemy reply drink occur support speech nature range steam motion path liquid log meant quotient
teeth shell neck hello please thanks sorry today tomorrow yesterday computer server model token speculative
decoding draft target accept reject fast slow latency throughput request response prompt answer explain
summarize translate story poem code python function data test result fox lazy worry jumps quickly
because around something nothing everything anything someone everyone thing things why how really
maybe always usually sometimes another between however although without within across along behind
beyond during toward upon whom yours ours mine hers itself himself herself themselves myself ourselves
yourself am isn aren wasn weren haven hasn hadn doesn didn won wouldn shouldn couldn can't let's ok okay
please thank welcome good morning afternoon night week month year hour minute second today question
information system program problem service government company number group money business issue
point case student country world school family health community name team minute idea kid body
information back parent face others level office door health person art war history party result change
morning reason research girl guy moment air teacher force education foot boy age policy music market
sense nation plan college interest death experience effect use class control care field development
role effort rate heart drug show leader light voice wife police mind price report decision son view
relationship town road arm difference value building action model season society tax director
position player record paper space ground form event official matter center couple site project
activity star table need court american oil situation cost industry figure street image phone data
picture practice piece land product doctor wall patient worker news test movie north love support
technology step baby computer type attention film tree source organization hair window evidence
population truth song economy behavior network memory fact language culture chance apple orange banana
coffee tea bread cheese chicken pizza sugar salt pepper rice potato tomato happy sad angry tired hungry
beautiful ugly easy hard cheap expensive small large tiny huge early late quiet loud clean dirty
empty full rich poor young old new modern ancient simple complex important possible impossible
"""

# Words that are not inflected (articles, pronouns, prepositions, conjunctions, auxiliaries ...).
_FUNCTION_WORDS_TEXT = """
the of and to a in is it you that he was for on are with as i his they be at one have this from or
had by but what some we can out other were all there when up use your how said an each she which do
their time if will way about many then them would so these her him has more could no my than who may
been now any only me our very just too also here why us must should own still might while those both
until once ever though yet am either whether since upon whom yours ours mine hers itself himself
herself themselves myself ourselves yourself isn aren wasn weren haven hasn hadn doesn didn won wouldn
shouldn couldn let ok okay oh yes nor thus among toward against off again never always often does did
shall without within across along behind beyond during however although because around another
between maybe really usually sometimes every enough such even rather quite almost
"""
_FUNCTION_WORDS = set(_FUNCTION_WORDS_TEXT.split())


_PUNCTUATION = ".,!?;:'\"()-[]{}<>/\\@#$%&*+=_`~|^"
_SUFFIXES = ("s", "ed", "ing", "er", "ly", "est", "ness", "ment", "able", "ful")


def _vocabulary() -> list[str]:
    """The 4096 tokens, in id order: specials, punctuation, numbers, words, then inflections."""
    seen: dict[str, None] = {}

    def add(tok: str) -> None:
        if len(seen) < VOCAB_SIZE and tok not in seen:
            seen[tok] = None

    letters = "abcdefghijklmnopqrstuvwxyz"  # "it's" -> "it", "'", "s"
    base = _base_words()
    for tok in [*SPECIALS, *_PUNCTUATION, *(str(n) for n in range(101)), *letters, *base]:
        add(tok)
    # Inflections of the base words, one suffix at a time over the whole list, until the vocabulary
    # is full: plurals first (most common), then -ed, -ing, -er, -ly, -est.
    for suffix in _SUFFIXES:
        for w in base:
            inflected = _inflect(w, suffix)
            if inflected is not None:
                add(inflected)
    n = 0
    while len(seen) < VOCAB_SIZE:  # only if the lists above ever shrink
        add(f"w{n}")
        n += 1
    return list(seen)


def _base_words() -> list[str]:
    """The word list once each, in order; the pre-tokenizer splits "don't" into "don", "'", "t", so
    the pieces are kept."""
    base: dict[str, None] = {}
    for w in _WORDS.split():
        for piece in w.replace("'", " ").split():
            base.setdefault(piece)
    return list(base)


def _inflect(word: str, suffix: str) -> str | None:
    """WORD with SUFFIX in English spelling (boxes, baked, happily), or None for words that take none:
    short ones, function words and numbers."""
    if len(word) < 3 or word in _FUNCTION_WORDS or word.isdigit():
        return None
    if suffix == "s" and word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if suffix in ("ed", "ing", "er", "est", "able") and word.endswith("e"):
        return word[:-1] + suffix
    if suffix in ("ed", "er", "ly", "est", "ness", "ful") and word.endswith("y"):
        return word[:-1] + ("ily" if suffix == "ly" else "i" + suffix)
    return word + suffix


def model_paths(outdir: str | os.PathLike[str]) -> dict[str, Path]:
    """Where the build puts each model: {"target": ..., "draft-noisy": ...}."""
    root = Path(outdir)
    return {TARGET: root / TARGET, DRAFT_NOISY: root / DRAFT_NOISY}


def is_built(outdir: str | os.PathLike[str]) -> bool:
    """True when OUTDIR holds a complete build of this BUILD_VERSION (the stamp is written last)."""
    stamp = Path(outdir) / STAMP_NAME
    try:
        data = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    if data.get("version") != BUILD_VERSION:
        return False
    return all((Path(outdir) / rel).is_file() for rel in data.get("files", []))


def _build_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(_vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    # Words (\w+) and runs of punctuation become tokens; spaces are dropped.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated")]
    )
    # Decoding joins tokens with spaces; the WordPiece decoder also tidies " ," to ",".
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=MODEL_SHAPE["max_position_embeddings"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(path))


def _build_target(path: Path) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    vocab = _vocabulary()
    ids = {tok: i for i, tok in enumerate(vocab)}
    config = LlamaConfig(
        vocab_size=len(vocab),
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=ids[BOS],
        eos_token_id=ids[EOS],
        pad_token_id=ids[PAD],
        **MODEL_SHAPE,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    model.save_pretrained(str(path), safe_serialization=True)
    GenerationConfig(bos_token_id=ids[BOS], eos_token_id=ids[EOS], pad_token_id=ids[PAD]).save_pretrained(str(path))
    _build_tokenizer(path)


def _build_noisy(target: Path, path: Path, factor: float = NOISE_FACTOR) -> None:
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(target), dtype=torch.bfloat16).eval()
    gen = torch.Generator().manual_seed(NOISE_SEED)
    with torch.no_grad():
        for _name, p in sorted(model.named_parameters()):
            if p.dim() < 2:
                continue
            w = p.float()
            noise = torch.randn(w.shape, generator=gen) * (factor * w.std())
            p.copy_((w + noise).to(p.dtype))
    model.save_pretrained(str(path), safe_serialization=True)
    for name in os.listdir(target):  # tokenizer, template and generation config as the target's
        if not name.endswith((".safetensors", ".bin")) and name != "config.json" and (target / name).is_file():
            shutil.copy2(target / name, path / name)


def build(outdir: str | os.PathLike[str], force: bool = False) -> dict[str, Path]:
    """Build the models into OUTDIR (skipped when already built); return model_paths(OUTDIR)."""
    root = Path(outdir)
    if not force and is_built(root):
        return model_paths(root)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    root.mkdir(parents=True, exist_ok=True)
    (root / STAMP_NAME).unlink(missing_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        _build_target(tmp / TARGET)
        _build_noisy(tmp / TARGET, tmp / DRAFT_NOISY)
        for name in (TARGET, DRAFT_NOISY):
            shutil.rmtree(root / name, ignore_errors=True)
            (tmp / name).rename(root / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    files = sorted(str(p.relative_to(root)) for name in (TARGET, DRAFT_NOISY) for p in (root / name).rglob("*"))
    files = [f for f in files if (root / f).is_file()]
    for f in files:
        (root / f).chmod(0o644)
    stamp = {"version": BUILD_VERSION, "seed": SEED, "noise_factor": NOISE_FACTOR, "files": files}
    (root / STAMP_NAME).write_text(json.dumps(stamp, indent=1) + "\n")
    return model_paths(root)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    force = "--force" in args
    rest = [a for a in args if a != "--force"]
    if len(rest) != 1:
        print("usage: python tests/vllm_models.py [--force] OUTDIR", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    already = not force and is_built(rest[0])
    paths = build(rest[0], force=force)
    what = "already built" if already else f"built in {time.monotonic() - t0:.1f} s"
    print(f"vllm_models: {what}: {', '.join(str(p) for p in paths.values())}", file=sys.stderr)
    for p in paths.values():
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
