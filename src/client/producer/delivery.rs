//! A record's delivery: the outcome of its batch, shared by the batch's records (Kafka's
//! `ProduceRequestResult`: [`BatchDelivery`]), and each record's handle on it (Kafka's
//! `FutureRecordMetadata`: [`DeliveryHandle`], giving a [`RecordMetadata`]).

use std::sync::{Arc, Condvar, Mutex};

use super::error::ProducerError;

/// Where a record was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Partition.
    pub partition: i32,
    /// Offset; -1 with `acks=0` (no answer tells it).
    pub offset: i64,
}

/// The shared outcome of one batch.
#[derive(Debug)]
pub(super) struct BatchDelivery {
    partition: i32,
    /// `Some(Ok(base offset))` or `Some(Err)` once done.
    result: Mutex<Option<Result<i64, ProducerError>>>,
    done: Condvar,
}

impl BatchDelivery {
    /// The outcome of a batch to `partition`, not known yet.
    pub(super) fn new(partition: i32) -> Self {
        BatchDelivery { partition, result: Mutex::new(None), done: Condvar::new() }
    }

    /// Sets the outcome (the batch's base offset, -1 with `acks=0`, or its error) and wakes the
    /// waiters.
    pub(super) fn complete(&self, result: Result<i64, ProducerError>) {
        *self.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
        self.done.notify_all();
    }
}

/// The delivery result of one record: [`DeliveryHandle::wait`] blocks until its batch is
/// answered. Cheap to hold (a shared pointer to the batch's result and the record's index).
#[derive(Clone, Debug)]
pub struct DeliveryHandle {
    batch: Arc<BatchDelivery>,
    index: i32,
}

impl DeliveryHandle {
    /// The handle of the record at `index` in the batch of `batch`.
    pub(super) fn new(batch: Arc<BatchDelivery>, index: i32) -> Self {
        DeliveryHandle { batch, index }
    }

    fn map(&self, r: &Result<i64, ProducerError>) -> Result<RecordMetadata, ProducerError> {
        match r {
            Ok(base) => Ok(RecordMetadata {
                partition: self.batch.partition,
                offset: if *base < 0 { -1 } else { base + self.index as i64 },
            }),
            Err(e) => Err(e.clone()),
        }
    }

    /// The result when the batch was answered, else `None`.
    pub fn try_result(&self) -> Option<Result<RecordMetadata, ProducerError>> {
        self.batch.result.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|r| self.map(r))
    }

    /// Waits for the result: the partition and offset, or the error that failed the batch.
    /// Bounded by `delivery.timeout.ms` plus a request timeout on the producer's side.
    pub fn wait(&self) -> Result<RecordMetadata, ProducerError> {
        let mut g = self.batch.result.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = g.as_ref() {
                return self.map(r);
            }
            g = self.batch.done.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}
