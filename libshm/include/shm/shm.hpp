/// @file
/// Everything a program that uses libshm needs, in one include: segments, the
/// structures' handles, the ledger and the programs' describe tree. Including
/// the individual headers (`shm/<structure>/...`) is equivalent and compiles less.
#pragma once

#include "shm/channel/consumer.hpp"
#include "shm/channel/producer.hpp"
#include "shm/egress/core.hpp"
#include "shm/egress/egress.hpp"
#include "shm/error.hpp"
#include "shm/fanout/priority_fanout.hpp"
#include "shm/ledger/checked.hpp"
#include "shm/ledger/keyed_buckets.hpp"
#include "shm/ledger/ledger.hpp"
#include "shm/ledger/slot_leases.hpp"
#include "shm/ledger/token_bucket.hpp"
#include "shm/mpmc/mpmc_ring.hpp"
#include "shm/relay/layout.hpp"
#include "shm/relay/policy.hpp"
#include "shm/relay/relay.hpp"
#include "shm/relay/stages.hpp"
#include "shm/segment/describe.hpp"
#include "shm/segment/kind.hpp"
#include "shm/segment/segment.hpp"
#include "shm/spill/page.hpp"
#include "shm/spsc/consumer.hpp"
#include "shm/spsc/producer.hpp"
#include "shm/topic/topic.hpp"
#include "shm/waitset/waitset.hpp"
