"""The seed study: four or more seeds of every tower family at a profile's sizes and budgets, probed,
so that every same-configuration and cross-type verdict rests on a distribution over seed pairs."""
