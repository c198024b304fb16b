"""Command options generated from a configuration dataclass (`config_cli`): a field is an option, its comment the
help; `train`'s options are its `TrainConfig`'s."""

import argparse
from dataclasses import dataclass, fields

import pytest

from twotower_lib.config_cli import add_config_arguments, config_from_args, config_to_argv, field_comments
from twotower_lib.train.config import TrainConfig, parse_duration


@dataclass
class Example:
    name: str                      # what it is called
    steps: int | None = None       # how many; a comment that goes on
                                   # over two lines
    rate: float = 0.5
    fast: bool = False             # go faster


def test_a_field_is_an_option_and_its_comment_the_help():
    assert field_comments(Example) == {"name": "what it is called", "steps": "how many; a comment that goes on over two lines",
                                       "fast": "go faster"}
    p = argparse.ArgumentParser()
    add_config_arguments(p, Example, options={"rate": {"flag": "--learning-rate"}})
    args = p.parse_args(["--name", "x", "--steps", "3", "--fast", "--learning-rate", "0.1"])
    assert config_from_args(Example, args) == Example("x", 3, 0.1, True)
    assert config_from_args(Example, p.parse_args(["--name", "y"])) == Example("y")
    with pytest.raises(SystemExit):
        p.parse_args(["--steps", "3"])                      # a field without a default is required
    helps = {a.dest: a.help for a in p._actions}
    assert helps["steps"] == "how many; a comment that goes on over two lines"


def test_train_has_one_option_per_training_field_each_with_its_help():
    from twotower_lib.train.loop import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    actions = {a.dest: a for a in p._actions}
    for f in fields(TrainConfig):
        assert f.name in actions and actions[f.name].help, f.name
    args = p.parse_args(["--model", "gpt", "--out", "x", "--budget", "20s", "--checkpoint-every", "1m", "--max-steps", "5"])
    tcfg = config_from_args(TrainConfig, args, {"budget_s": parse_duration, "checkpoint_every_s": parse_duration})
    assert (tcfg.preset, tcfg.budget_s, tcfg.checkpoint_every_s, tcfg.max_steps) == ("cpu", 20.0, 60.0, 5)
    assert tcfg == TrainConfig("gpt", "cpu", budget_s=20.0, checkpoint_every_s=60.0, max_steps=5)


def test_probe_has_one_option_per_probe_field_laid_over_its_recipe():
    from twotower_lib.probe.run import add_arguments, config_from_args
    from twotower_lib.probe.config import ProbeConfig

    p = argparse.ArgumentParser()
    add_arguments(p)
    actions = {a.dest: a for a in p._actions}
    assert all(f.name in actions and actions[f.name].help for f in fields(ProbeConfig))
    parse = lambda *a: config_from_args(p.parse_args(["RUN", *a]))  # noqa: E731
    assert parse() == ProbeConfig()                                         # nothing given: the default recipe
    assert parse("--legacy", "--max-epochs", "5").max_epochs == 5           # a given option over another recipe
    assert parse("--no-cooldown-average").cooldown_average is False and parse("--tol", "0.01").tol == 0.01


@dataclass
class Switches:
    name: str
    on: bool = True                # on by default
    count: int | None = None


@pytest.mark.parametrize("cfg", [Example("x"), Example("x", 3, 0.1, True), Switches("y", on=False, count=2), Switches("z")])
def test_a_config_written_as_a_command_line_parses_back_to_itself(cfg):
    options = {"rate": {"flag": "--learning-rate"}}
    p = argparse.ArgumentParser()
    add_config_arguments(p, type(cfg), options=options)
    argv = config_to_argv(cfg, options)
    assert config_from_args(type(cfg), p.parse_args(argv)) == cfg
    assert argv[:2] == ["--name", cfg.name]                     # a required field always; defaults left out
    assert ("--no-on" in argv) == (isinstance(cfg, Switches) and not cfg.on)
    assert ("--learning-rate" in argv) == (isinstance(cfg, Example) and cfg.rate != 0.5)
