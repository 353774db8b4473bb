package io.github.sluicerl.sluice;

/**
 * What a resource does while its lease has expired without renewal.
 *
 * <p>Source: doorman-design.md, "Optimistic, pessimistic and safe mode operation".
 */
public enum Mode {
  /** The safe capacity the server last sent (0 before any; negative: no limit). The default. */
  SAFE,
  /** As if capacity 0 was granted. */
  PESSIMISTIC,
  /** As if what the resource wants was granted. */
  OPTIMISTIC
}
