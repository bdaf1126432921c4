"""``lightning-rlvr fit|validate|test``: LightningCLI over ``RLVRModule`` and ``RLVRDataModule``.

Configs compose: ``--config configs/quickstart.yaml --config configs/method/shear.yaml``
merges left to right, and any key can be overridden with a dotted flag
(``--model.lr 1e-4``). ``--print_config`` shows the merged result. The method
is ``model.credit``, chosen by ``class_path``. ``test --ckpt_path ckpt`` needs no
config: the module (task, policy, method) is rebuilt from the checkpoint.
"""

from __future__ import annotations

import os
import sys
import warnings

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from lightning_rlvr.data import RLVRDataModule
from lightning_rlvr.errors import RLVRError
from lightning_rlvr.module import RLVRModule


class RLVRCLI(LightningCLI):
    """LightningCLI with RLVR defaults: CSV logs, a ``last`` checkpoint, seeded runs."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults({"checkpoint.save_last": True, "checkpoint.every_n_train_steps": 25})
        parser.set_defaults(
            {
                "trainer.logger": {
                    "class_path": "lightning.pytorch.loggers.CSVLogger",
                    "init_args": {"save_dir": "runs", "name": "rlvr"},
                },
                "trainer.log_every_n_steps": 1,
                "trainer.num_sanity_val_steps": 0,
            }
        )


def main(args: list[str] | None = None) -> None:
    """Console entry point (``lightning-rlvr``)."""
    run(args)


def run(args: list[str] | None = None) -> RLVRCLI:
    """Run the CLI and return it (for tests and notebooks); user errors print one line and exit 2."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Lightning warns that manual-optimisation checkpoints hold post-step weights: that is what resume needs.
    warnings.filterwarnings("ignore", message=".*ModelCheckpoint with manual optimization.*")
    warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\).*")
    try:
        return RLVRCLI(
            RLVRModule,
            RLVRDataModule,
            seed_everything_default=0,
            save_config_kwargs={"overwrite": True},
            args=args,
            auto_configure_optimizers=False,
        )
    except Exception as err:
        user_error = _user_error(err)
        if user_error is None:
            raise
        sys.stderr.write(f"lightning-rlvr: error: {user_error}\n")
        raise SystemExit(2) from None


def _user_error(err: BaseException) -> RLVRError | None:
    """The ``RLVRError`` behind ``err``, also when jsonargparse re-raised it as a parsing error."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, RLVRError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


if __name__ == "__main__":
    main()
