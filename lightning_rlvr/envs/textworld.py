"""TextWorld household (cooking) games, the ALFWorld-like family, generated offline and cached.

Games come from TextWorld's own cooking generator (``tw-cooking``: find the cookbook, gather the
ingredients, prepare and eat the meal). Each game is a pure function of its seed and the size knobs
(``rooms``, ``recipe``, ``take``, ``open``, ``cook``, ``cut``), so the pool is generated once, compiled
with TextWorld's bundled Inform 7 compiler (no network), and cached under
``cache_root()/textworld/<key>``, where ``key`` hashes every knob that changes a game. Generation is
slow (seconds per game; docs/environments.md gives measured numbers), hence the cache: a run after the first
loads games in a fraction of a second each.

Splits are disjoint by construction twice over: game ``i`` of a split has a seed hashed from
``(seed, split, i)``, and the generator's own food split (``train`` / ``valid`` / ``test``) gives each
split ingredients the others never use (``ingredients="split"``, the default). ``ingredients="train"``
draws every split's food from the generator's train list instead: held-out games are still new games
(their own seeds), with ingredients a small model's word vocabulary knows (the agent quickstart).

An episode runs the compiled game. Observations are trimmed: TextWorld's text carries an ASCII-art
banner, a status line and room descriptions padded with jokes; ``trim_observation`` drops the banner
and the prompt, keeps short replies whole and keeps only the sentences of long paragraphs that name
something in the game (an object, a room, a direction), then caps the length. With ``show_commands``
the admissible commands are listed after each observation, so the policy can pick instead of guess.
Reward is sparse: 1 when the game is won, 0 otherwise (lost, or cut at the turn limit). Every game's
expert walkthrough is ``Problem.solution`` (one command per line), verified to win when the game is
generated, and feeds the warm start.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Literal

from ..core.errors import RLVRError
from ..core.paths import cache_root
from ..core.problem import SPLITS, Problem, Verdict
from ..core.progress import Progress
from .base import Environment

ROOM_CHOICES = (1, 6, 9, 12)  # the cooking generator's map sizes
FOOD_SPLIT = {"train": "train", "val": "valid", "test": "test"}  # our split -> generator's food split
DIRECTIONS = ("north", "south", "east", "west")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[A-Za-z]{2,}")
# Out-of-world verbs the interpreter obeys (quitting waits for "yes"/"no" and swallows every later
# command; restoring or undoing rewrites the episode): the adapter answers them itself.
META_VERBS = frozenset(
    {"q", "quit", "restart", "save", "restore", "undo", "script", "unscript", "transcript"}
)
POOL_FORMAT = 2  # bump when what a cached game stores (its meta file, the trimming) changes
# Fixed sentences the cooking generator prints in every game (the intro, the cookbook's preamble):
# they carry no information, and dropping them puts the recipe's ingredients first in the cookbook's
# reply (word 3 instead of ~30), where a small policy can find them and copy them into a command.
FLAVOUR = re.compile(
    r"You are hungry!|Let's cook a delicious meal\.|Check the cookbook in the kitchen for the recipe\."
    r"|Once done, enjoy your meal!|You open the copy of \"Cooking: A Modern Approach \(3rd Ed\.\)\" and"
    r" start reading:|Recipe #\d+|Gather all following ingredients and follow the directions to prepare"
    r" this tasty meal\."
)


def trim_observation(text: str, names: list[str], max_words: int) -> str:
    """TextWorld's raw feedback made short: no banner, no prompt, no flavour sentences, capped.

    The generator's fixed sentences (``FLAVOUR``) go first. Then short lines (one or two sentences:
    replies to a command, headers) are kept whole; in longer ones (room descriptions) a sentence
    survives only if it names one of ``names`` or a direction.
    """
    text = FLAVOUR.sub("", text.split("\n>")[0])  # the prompt and the status line that follows it
    lines = [ln.strip() for ln in text.splitlines() if _WORD.search(ln)]  # banner lines have no words
    keep_words = [n.lower() for n in names] + list(DIRECTIONS)
    kept = []
    for line in lines:  # a room description is one long line; replies and headers are short ones
        sentences = [s for s in _SENTENCE.split(line) if s]
        if len(sentences) > 2:
            sentences = [s for s in sentences if any(w in s.lower() for w in keep_words)]
        kept += sentences
    words = " ".join(kept).split()
    return " ".join(words[:max_words]) + (" ..." if len(words) > max_words else "")


class TextWorldCooking(Environment):
    """Cooking games from TextWorld's generator, one game per problem.

    Args:
        train_games: games in the ``train`` split (the pool is this plus ``val_games`` + ``test_games``).
        val_games: games in ``val``.
        test_games: games in ``test``.
        seed: fixes every game (with the knobs below); a new seed is a new pool.
        rooms: locations per game (1, 6, 9 or 12; more rooms mean navigation).
        recipe: ingredients in the recipe.
        take: ingredients the player must find (at most ``recipe``; 0: all are in the kitchen).
        open: containers and doors must be opened.
        cook: some ingredients must be cooked.
        cut: some ingredients must be cut.
        max_turns: the turn limit of an episode.
        show_commands: list the admissible commands after each observation.
        max_observation_words: cap on an observation's words after trimming.
        ingredients: ``split``: each split has its own foods (the generator's split); ``train``: every
            split uses the train foods (held-out games, known words).
    """

    def __init__(
        self,
        train_games: int = 64,
        val_games: int = 16,
        test_games: int = 16,
        seed: int = 0,
        rooms: int = 1,
        recipe: int = 1,
        take: int = 1,
        open: bool = False,
        cook: bool = False,
        cut: bool = False,
        max_turns: int = 12,
        show_commands: bool = True,
        max_observation_words: int = 80,
        ingredients: Literal["split", "train"] = "split",
    ) -> None:
        if rooms not in ROOM_CHOICES:
            raise RLVRError(f"TextWorldCooking rooms={rooms}: the generator supports {ROOM_CHOICES}")
        if ingredients not in ("split", "train"):
            raise RLVRError(f"TextWorldCooking ingredients={ingredients!r}: expected 'split' or 'train'")
        if not 0 <= take <= recipe:
            raise RLVRError(f"TextWorldCooking take={take} must be between 0 and recipe={recipe}")
        self.train_games = train_games
        self.val_games = val_games
        self.test_games = test_games
        self.seed = seed
        self.rooms = rooms
        self.recipe = recipe
        self.take = take
        self.open = open
        self.cook = cook
        self.cut = cut
        self.max_turns = max_turns
        self.show_commands = show_commands
        self.max_observation_words = max_observation_words
        self.ingredients = ingredients
        self._game = None  # the running episode's textworld environment (replaced by reset)
        self._names: list[str] = []
        self._commands: list[str] = []  # the admissible commands of the last observation
        self._invalid = False  # whether the last action was not one of them

    # -- the pool -------------------------------------------------------------------------------

    def settings(self, split: str, index: int) -> dict:
        """The generator settings of game ``index`` of ``split`` (everything that fixes the game)."""
        h = hashlib.blake2b(f"{self.seed}:{split}:{index}".encode(), digest_size=8).digest()
        game_seed = int.from_bytes(h[:4], "little") % 2**31
        return {
            "recipe": self.recipe,
            "take": self.take,
            "go": self.rooms,
            "open": self.open,
            "cook": self.cook,
            "cut": self.cut,
            "drop": False,
            "recipe_seed": int.from_bytes(h[4:], "little") % 2**31 + 1,  # 0 means "random" to the generator
            "split": FOOD_SPLIT[split if self.ingredients == "split" else "train"],
            "game_seed": game_seed,
        }

    def pool_dir(self) -> Path:

        knobs = [self.seed, self.rooms, self.recipe, self.take, self.open, self.cook, self.cut]
        if self.ingredients != "split":  # the default adds nothing: existing pools keep their key
            knobs.append(self.ingredients)
        blob = json.dumps(knobs)
        key = hashlib.sha256(f"{blob}:{_textworld_version()}:{POOL_FORMAT}".encode()).hexdigest()[:16]
        return cache_root() / "textworld" / key

    def size(self, split: str) -> int:
        _check_split(split)
        return {"train": self.train_games, "val": self.val_games, "test": self.test_games}[split]

    def ensure_pool(self) -> dict:
        """Generate every missing game of the pool (under a lock, so parallel ranks never clash).

        Returns ``{"generated": n, "seconds": s, "bytes": b}`` for the pool directory.
        """
        root = self.pool_dir()
        root.mkdir(parents=True, exist_ok=True)
        todo = [(s, i) for s in SPLITS for i in range(self.size(s)) if not _meta_path(root, s, i).is_file()]
        start = time.perf_counter()
        if todo:
            with _locked(root / ".lock"):
                todo = [(s, i) for s, i in todo if not _meta_path(root, s, i).is_file()]  # others' work
                desc = f"textworld pool {root.name} (generated once, then cached)"
                with Progress(len(todo), desc, unit="games", every_s=15) as progress:
                    for split, index in todo:
                        generate_game(self.settings(split, index), root, f"{split}-{index}")
                        progress.update()
        seconds = time.perf_counter() - start
        size = sum(p.stat().st_size for p in root.iterdir() if p.is_file())
        return {"generated": len(todo), "seconds": seconds, "bytes": size}

    def problem(self, split: str, index: int) -> Problem:
        _check_split(split)
        if not 0 <= index < self.size(split):
            raise IndexError(f"{split} has {self.size(split)} games, asked for {index}")
        root = self.pool_dir()
        if not _meta_path(root, split, index).is_file():
            self.ensure_pool()
        meta = _read_meta(root, split, index)
        return Problem(
            prompt=meta["first_observation"],
            answer="won",
            solution="\n".join(meta["walkthrough"]),
            meta={
                "game": str(root / f"{split}-{index}.z8"),
                "split": split,
                "index": index,
                "walkthrough": meta["walkthrough"],
            },
        )

    def vocabulary_texts(self, split: str = "train", limit: int = 64) -> list[str]:
        """Every trimmed observation and admissible command the expert met, from the cached pool."""
        texts: list[str] = []
        for i in range(min(self.size(split), limit)):
            self.problem(split, i)  # generates the pool when missing
            texts += _read_meta(self.pool_dir(), split, i)["texts"]
        return ["Commands:", *texts]

    # -- an episode -----------------------------------------------------------------------------

    def reset(self, problem: Problem) -> str:
        import textworld

        infos = textworld.EnvInfos(admissible_commands=True, won=True, lost=True, entities=True)
        self._game = textworld.start(problem.meta["game"], request_infos=infos)
        state = self._game.reset()
        self._names = list(state.entities or [])
        return self._format(state.feedback, state.admissible_commands)

    def step(self, action: str) -> tuple[str, bool, Verdict | None]:
        if self._game is None:
            raise RuntimeError("step before reset")
        # The interpreter (frotz) reads "\x" as its own meta-command (\q quits it): never pass one on.
        action = " ".join(action.replace("\\", " ").split())
        self._invalid = action not in self._commands  # not one the game listed as admissible
        if action.split()[:1] and action.split()[0].lower() in META_VERBS:
            return "That command is not available in this game." + self._commands_suffix(), False, None
        state, _, done = self._game.step(action)
        obs = self._format(state.feedback, state.admissible_commands)
        if not done:
            return obs, False, None
        won = bool(state.won)
        final = trim_observation(state.feedback, self._names, self.max_observation_words)
        return obs, True, Verdict(1.0 if won else 0.0, final, correct=won)

    def is_invalid(self, action: str, observation: str) -> bool:
        """The last action was not among the game's admissible commands (the game could not do it)."""
        return self._invalid

    def close(self) -> None:
        if self._game is not None:
            self._game.close()
            self._game = None

    def clone(self) -> TextWorldCooking:
        twin = super().clone()
        twin._game = None
        return twin

    def _format(self, feedback: str, commands: list[str] | None) -> str:
        self._commands = list(commands or [])
        return trim_observation(feedback, self._names, self.max_observation_words) + self._commands_suffix()

    def _commands_suffix(self) -> str:
        if not (self.show_commands and self._commands):
            return ""
        return "\nCommands: " + ", ".join(c for c in self._commands if c not in ("look", "inventory"))


# -- generation (module functions: one place each) ----------------------------------------------


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")


def _meta_path(root: Path, split: str, index: int) -> Path:
    return root / f"{split}-{index}.meta.json"


def _read_meta(root: Path, split: str, index: int) -> dict:
    return json.loads(_meta_path(root, split, index).read_text())


def _textworld_version() -> str:
    import textworld

    return textworld.__version__


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@functools.cache
def _knowledge_base(logic_path: str, grammar_path: str):
    """TextWorld's knowledge base, parsed once per process (parsing is over half a game's generation).

    The knowledge base is read-only during generation, so sharing it leaves every game a pure function
    of its settings (the tests regenerate games and compare them).
    """
    from textworld.generator.data import KnowledgeBase

    return KnowledgeBase.load(logic_path=logic_path, grammar_path=grammar_path)


class _CachedKB:
    """Stands in for ``KnowledgeBase`` inside the cooking generator, answering ``load`` from the cache."""

    @staticmethod
    def load(logic_path: str, grammar_path: str):
        return _knowledge_base(logic_path, grammar_path)


def make_game(settings: dict):
    """The TextWorld ``Game`` of ``settings`` (see ``TextWorldCooking.settings``), not yet compiled."""
    from textworld import GameOptions
    from textworld.challenges.tw_cooking import cooking

    options = GameOptions()
    options.seeds = settings["game_seed"]
    gen_settings = {k: v for k, v in settings.items() if k != "game_seed"}
    original, cooking.KnowledgeBase = cooking.KnowledgeBase, _CachedKB
    try:
        return cooking.make(gen_settings, options)
    finally:
        cooking.KnowledgeBase = original


def generate_game(settings: dict, root: Path, name: str) -> dict:
    """Generate, compile and verify one game; write ``name.z8``, ``name.json``, ``name.meta.json``.

    Files are written in a private folder and renamed into ``root``, the meta file last: a game
    whose meta file exists is complete. The expert walkthrough is played once here and must win
    (an error otherwise); the observations and commands it meets are kept for the vocabulary.
    """
    import textworld
    from textworld import GameOptions
    from textworld.generator import compile_game

    tmp = root / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        game = make_game(settings)
        options = GameOptions()
        options.path = str(tmp / f"{name}.z8")
        options.force_recompile = True
        path = compile_game(game, options)
        walkthrough = list(game.metadata["walkthrough"])
        infos = textworld.EnvInfos(admissible_commands=True, won=True, entities=True)
        env = textworld.start(path, request_infos=infos)
        state = env.reset()
        first, texts = state.feedback, [state.feedback, *state.admissible_commands]
        names = list(state.entities or [])
        for command in walkthrough:
            state, _, done = env.step(command)
            texts += [state.feedback, *state.admissible_commands]
        env.close()
        if not state.won:
            raise RuntimeError(f"the expert walkthrough does not win TextWorld game {settings}")
        meta = {
            "settings": settings,
            "walkthrough": walkthrough,
            "first_observation": trim_observation(first, names, 10**6),
            "texts": [trim_observation(t, names, 10**6) if "\n" in t else t for t in texts],
        }
        (tmp / f"{name}.meta.json").write_text(json.dumps(meta))
        for suffix in (".z8", ".json", ".meta.json"):  # meta last: its presence marks a complete game
            os.replace(tmp / f"{name}{suffix}", root / f"{name}{suffix}")
        return meta
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
