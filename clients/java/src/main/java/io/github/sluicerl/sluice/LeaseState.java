package io.github.sluicerl.sluice;

import io.github.sluicerl.sluice.proto.doorman.ResourceRequest;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.function.DoubleConsumer;
import java.util.logging.Level;
import java.util.logging.Logger;

/** One resource's lease, shared by its handles. Its fields are guarded by {@code this}. */
final class LeaseState {
  private static final Logger log = Logger.getLogger("io.github.sluicerl.sluice");

  final Leases leases;
  final String id;
  final int priority;
  final Mode mode;
  final Set<Resource> handles = new LinkedHashSet<>(); // guarded by leases
  final Object askLock = new Object();

  double wants;
  boolean hasLease;
  double capacity;
  double expiry;
  double refresh;
  long leaseSeq;
  double safe;
  boolean safeKnown;
  boolean released;
  // Notifications.
  double current;
  long seq = 1;
  private final List<Object[]> listeners = new ArrayList<>(); // {DoubleConsumer, long seen}
  private boolean delivering;
  // Doorman's 5-second rule.
  boolean requested;
  double sentAt;
  long wantsGen;
  long sentGen;

  LeaseState(Leases leases, String id, double wants, int priority) {
    this.leases = leases;
    this.id = id;
    this.wants = wants;
    this.priority = priority;
    this.mode = leases.mode;
  }

  /** The effective capacity (this held). */
  double effective(double now) {
    if (released) {
      return 0;
    }
    if (leases.killed) {
      return Double.POSITIVE_INFINITY;
    }
    if (hasLease && expiry > now) {
      return capacity;
    }
    switch (mode) {
      case OPTIMISTIC:
        return wants;
      case PESSIMISTIC:
        return 0;
      default:
        if (safeKnown) {
          return safe < 0 ? Double.POSITIVE_INFINITY : safe;
        }
        return 0;
    }
  }

  void changeLocked(double now) {
    double cur = effective(now);
    if (Double.compare(cur, current) != 0) {
      current = cur;
      seq++;
    }
  }

  synchronized void addListener(DoubleConsumer f) {
    changeLocked(leases.now());
    listeners.add(new Object[] {f, 0L});
  }

  /** Tells the listeners the newest capacity, holding no lock while they run; one thread at a time, newest last. */
  void deliver() {
    synchronized (this) {
      if (delivering) {
        return;
      }
      delivering = true;
    }
    boolean done = false;
    try {
      while (true) {
        double cur;
        List<DoubleConsumer> due = new ArrayList<>();
        synchronized (this) {
          long s = seq;
          cur = current;
          for (Object[] e : listeners) {
            if ((long) e[1] < s) {
              e[1] = s;
              due.add((DoubleConsumer) e[0]);
            }
          }
          if (due.isEmpty()) {
            delivering = false;
            done = true;
            return;
          }
        }
        for (DoubleConsumer f : due) {
          try {
            f.accept(cur);
          } catch (RuntimeException e) {
            log.log(Level.WARNING, "sluice: a listener of " + id + " failed", e);
          }
        }
      }
    } finally {
      if (!done) {
        synchronized (this) {
          delivering = false;
        }
      }
    }
  }

  synchronized ResourceRequest request(double now, long[] gen) {
    ResourceRequest.Builder r = ResourceRequest.newBuilder().setResourceId(id).setPriority(priority).setWants(wants);
    if (hasLease && expiry > now) {
      r.getHasBuilder().setExpiryTime((long) expiry).setRefreshInterval((long) refresh).setCapacity(capacity);
    }
    gen[0] = wantsGen;
    return r.build();
  }

  synchronized void sent(double at, long gen) {
    requested = true;
    sentAt = at;
    sentGen = gen;
  }

  /** {ready, due, latest (NaN: must go when due)}: when the resource may next be sent, when it should, how long a refresh may wait to travel with others. */
  synchronized double[] schedule(double now) {
    if (!requested) {
      return new double[] {now, now, Double.NaN};
    }
    double ready = sentAt + Leases.MIN_REQUEST_INTERVAL;
    if (wantsGen != sentGen || !hasLease || !(expiry > now)) {
      return new double[] {ready, ready, Double.NaN};
    }
    double interval = Math.max(refresh, Leases.MIN_REQUEST_INTERVAL);
    double due = sentAt + interval;
    double latest = expiry - Leases.EXPIRY_MARGIN;
    if (latest < due) {
      return new double[] {ready, Math.max(latest, ready), Double.NaN};
    }
    return new double[] {ready, due, latest};
  }

  void grant(double cap, double exp, double ri, Double safeCap, long s, boolean pushed, double now) {
    synchronized (this) {
      if (released || ((pushed || s != 0) && s <= leaseSeq)) {
        return; // released, or older than the lease held
      }
      leaseSeq = Math.max(leaseSeq, s);
      hasLease = true;
      capacity = cap;
      expiry = exp;
      refresh = ri;
      if (safeCap != null) {
        safe = safeCap;
        safeKnown = true;
      }
      changeLocked(now);
    }
    deliver();
  }

  void expire(double now) {
    synchronized (this) {
      if (hasLease && !(expiry > now)) {
        hasLease = false;
      }
      changeLocked(now);
    }
    deliver();
  }

  void setWants(double w) throws ClosedException {
    boolean changed;
    synchronized (this) {
      if (released) {
        throw new ClosedException("resource " + id + " was released");
      }
      changed = wants != w;
      wants = w;
      if (changed) {
        wantsGen++;
      }
      changeLocked(leases.now());
    }
    if (changed) {
      leases.poke();
    }
  }

  void askTotal() throws ClosedException {
    synchronized (askLock) {
      setWants(leases.sumWants(this));
    }
    deliver();
  }

  boolean markReleased() {
    synchronized (this) {
      if (released) {
        return false;
      }
      released = true;
      changeLocked(leases.now());
    }
    deliver();
    return true;
  }
}
