//! The files the stage's key hashed, looked at after every epoch: one written to,
//! replaced or removed while the stage trains ends it with an error naming the file, so
//! that no more time goes into a result that could not be stored (the runner checks them
//! once more when the stage ends, their content too where their stamp cannot vouch for
//! it, and stores nothing if one changed). Each looks costs one `stat` per file.

use super::{Callback, Control, Made, Out, Setup};
use crate::observer::EpochRecord;
use cache::HashedFile;
use pipeline_core::freshness::{changed_during_run, changed_input};

pub fn make<'a>(setup: &Setup<'a>) -> Made<'a> {
    Ok((!setup.inputs.is_empty()).then(|| {
        Box::new(InputsUnchanged {
            stage: setup.stage.name().to_string(),
            inputs: setup.inputs,
        }) as Box<dyn Callback + 'a>
    }))
}

struct InputsUnchanged<'a> {
    stage: String,
    inputs: &'a [HashedFile],
}

impl Callback for InputsUnchanged<'_> {
    fn name(&self) -> &'static str {
        "inputs-unchanged"
    }

    fn epoch_ended(&mut self, _record: &EpochRecord, _out: &mut Out) -> Control {
        match changed_input(self.inputs, false) {
            Some((file, how)) => {
                Control::Fail(Box::new(changed_during_run(&self.stage, file, &how)))
            }
            None => Control::Continue,
        }
    }
}
