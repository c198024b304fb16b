"""The size ladder: four seeds of every tower family at three tower sizes, one epoch each (`runner`), and
the partition and orientation statistics against size (`report`)."""
