//! A TorchScript module (`model { torchscript "net.pt" }`) through the C++ shim
//! (`shim/script.cpp`): loaded onto a device, converted to the weights' dtype, its
//! parameters *and* buffers listed under their state-dict names (tch's `CModule` lists
//! parameters only), switched between training and evaluation, and run forward.

use crate::shim::check;
use manifests::{Diagnostic, TorchScriptSpec};
use pipeline_core::torchscript::{refusal_of, Module};
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use tch::{Device, Kind, TchError, Tensor};

mod ffi {
    use std::ffi::{c_char, c_void};

    extern "C" {
        pub fn pipeline_script_load(
            path: *const c_char,
            device: i32,
            out: *mut *mut c_void,
        ) -> *const c_char;
        pub fn pipeline_script_free(module: *mut c_void);
        pub fn pipeline_script_to_kind(module: *mut c_void, kind: i32) -> *const c_char;
        pub fn pipeline_script_tensors(
            module: *mut c_void,
            data: *mut c_void,
            each: unsafe extern "C" fn(*mut c_void, *const c_char, *mut c_void, i32),
        ) -> *const c_char;
        pub fn pipeline_script_train(module: *mut c_void, on: i32) -> *const c_char;
        pub fn pipeline_script_arguments(
            module: *mut c_void,
            data: *mut c_void,
            each: unsafe extern "C" fn(*mut c_void, *const c_char, i32),
        ) -> *const c_char;
        pub fn pipeline_script_forward(
            module: *mut c_void,
            inputs: *const *mut c_void,
            count: i32,
            out: *mut *mut c_void,
        ) -> *const c_char;
    }
}

/// One of a module's tensors: a parameter or a buffer, under its state-dict name.
pub struct Named {
    pub name: String,
    pub tensor: Tensor,
    pub parameter: bool,
    /// Listed before under another name (a tied weight), so trained once, there.
    pub repeat: bool,
}

/// A loaded TorchScript module.
#[derive(Debug)]
pub struct ScriptModule {
    module: *mut c_void,
    /// The mode last set: 0 unknown, 1 evaluation, 2 training.
    mode: AtomicU8,
}

// SAFETY: a `torch::jit::Module` is a handle to a reference-counted object that libtorch
// lets several threads run; the mode is switched through an atomic.
unsafe impl Send for ScriptModule {}
unsafe impl Sync for ScriptModule {}

impl Drop for ScriptModule {
    fn drop(&mut self) {
        // SAFETY: `module` came from `pipeline_script_load` and is freed once.
        unsafe { ffi::pipeline_script_free(self.module) }
    }
}

/// c10's number for a floating dtype.
fn scalar_type(kind: Kind) -> i32 {
    match kind {
        Kind::Half => 5,
        Kind::Float => 6,
        Kind::Double => 7,
        Kind::BFloat16 => 15,
        other => unreachable!("weights are floating point, not {other:?}"),
    }
}

unsafe extern "C" fn push_named(data: *mut c_void, name: *const c_char, t: *mut c_void, p: i32) {
    // SAFETY: `data` is the `Vec<Named>` passed to `pipeline_script_tensors`, `name` a
    // NUL-terminated string alive for the call, and `t` a new `at::Tensor*` we own.
    let out = &mut *(data as *mut Vec<Named>);
    out.push(Named {
        name: CStr::from_ptr(name).to_string_lossy().into_owned(),
        tensor: Tensor::from_ptr(t as *mut torch_sys::C_tensor),
        parameter: p == 1,
        repeat: p == 2,
    });
}

unsafe extern "C" fn push_argument(data: *mut c_void, name: *const c_char, default: i32) {
    // SAFETY: `data` is the `Vec<Argument>` passed to `pipeline_script_arguments`, `name`
    // a NUL-terminated string alive for the call.
    let out = &mut *(data as *mut Vec<Argument>);
    out.push(Argument {
        name: CStr::from_ptr(name).to_string_lossy().into_owned(),
        has_default: default != 0,
    });
}

/// One argument of a module's `forward`, after `self`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Argument {
    pub name: String,
    pub has_default: bool,
}

impl ScriptModule {
    /// Loads the archive at `path` onto `device`, with its floating tensors in `kind`.
    pub fn load(path: &Path, device: Device, kind: Kind) -> Result<ScriptModule, TchError> {
        let text = path
            .to_str()
            .ok_or_else(|| TchError::Torch(format!("{} is not UTF-8", path.display())))?;
        let c_path = CString::new(text)
            .map_err(|_| TchError::Torch("a path holds a NUL byte".to_string()))?;
        let index = match device {
            Device::Cuda(i) => i as i32,
            _ => -1,
        };
        let mut module: *mut c_void = std::ptr::null_mut();
        // SAFETY: on success the shim stores a new module in `module`, which `Drop` frees.
        check(unsafe { ffi::pipeline_script_load(c_path.as_ptr(), index, &mut module) })?;
        let loaded = ScriptModule {
            module,
            mode: AtomicU8::new(0),
        };
        // Every floating tensor in `kind`, whatever dtype the module was saved in.
        // SAFETY: `module` is live.
        check(unsafe { ffi::pipeline_script_to_kind(loaded.module, scalar_type(kind)) })?;
        Ok(loaded)
    }

    /// The parameters, then the buffers, of the module and its submodules; each shares
    /// the module's storage, so an in-place change (an optimizer step, a restored
    /// snapshot) is the module's.
    pub fn tensors(&self) -> Result<Vec<Named>, TchError> {
        let mut out: Vec<Named> = Vec::new();
        // SAFETY: `push_named` casts `data` back to this `Vec<Named>`, alive for the call.
        check(unsafe {
            ffi::pipeline_script_tensors(
                self.module,
                &mut out as *mut Vec<Named> as *mut c_void,
                push_named,
            )
        })?;
        Ok(out)
    }

    /// `module.train(train)` when the mode changes.
    fn set_mode(&self, train: bool) -> Result<(), TchError> {
        let mode = if train { 2 } else { 1 };
        if self.mode.swap(mode, Ordering::Relaxed) != mode {
            // SAFETY: `module` is live.
            if let Err(e) = check(unsafe { ffi::pipeline_script_train(self.module, train as i32) })
            {
                self.mode.store(0, Ordering::Relaxed);
                return Err(e);
            }
        }
        Ok(())
    }

    /// The arguments of the module's `forward`, after `self`.
    pub fn arguments(&self) -> Result<Vec<Argument>, TchError> {
        let mut out: Vec<Argument> = Vec::new();
        // SAFETY: `push_argument` casts `data` back to this `Vec<Argument>`, alive for
        // the call.
        check(unsafe {
            ffi::pipeline_script_arguments(
                self.module,
                &mut out as *mut Vec<Argument> as *mut c_void,
                push_argument,
            )
        })?;
        Ok(out)
    }

    /// The module's `forward` on `inputs` (its arguments in order), in training or
    /// evaluation mode.
    pub fn forward(&self, inputs: &[Tensor], train: bool) -> Result<Tensor, TchError> {
        self.set_mode(train)?;
        let mut inputs: Vec<Tensor> = inputs.iter().map(Tensor::shallow_clone).collect();
        let pointers: Vec<*mut c_void> = inputs
            .iter_mut()
            .map(|t| t.as_mut_ptr() as *mut c_void)
            .collect();
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: the tensors behind `pointers` are live for the call; on success `out`
        // is a new tensor we own.
        check(unsafe {
            ffi::pipeline_script_forward(
                self.module,
                pointers.as_ptr(),
                pointers.len() as i32,
                &mut out,
            )
        })
        .map_err(|e| match e {
            TchError::Torch(text) => TchError::Torch(interpreter_message(&text)),
            other => other,
        })?;
        Ok(unsafe { Tensor::from_ptr(out as *mut torch_sys::C_tensor) })
    }
}

/// What failed in the TorchScript interpreter, in one line: its report is a traceback
/// of the module's code ending in the error itself (`RuntimeError: mat1 and mat2 shapes
/// cannot be multiplied …`), which is what a user needs, with the place in their own
/// source where the call started (the first frame of the original code that is not
/// PyTorch's own).
pub fn interpreter_message(text: &str) -> String {
    if !text.contains("TorchScript interpreter") {
        return text.to_string();
    }
    let error = text.lines().rev().map(str::trim).find_map(|l| {
        l.split_once("Error: ")
            .filter(|(kind, _)| !kind.is_empty() && !kind.contains(' '))
            .map(|(_, message)| message)
    });
    let Some(error) = error else {
        return text.to_string();
    };
    // `  File "/home/me/net.py", line 8, in forward`
    let place = text
        .split_once("original code")
        .and_then(|(_, original)| {
            original
                .lines()
                .map(str::trim)
                .filter_map(|l| l.strip_prefix("File \""))
                .find(|file| !file.contains("/site-packages/torch/"))
        })
        .and_then(|frame| {
            let (file, rest) = frame.split_once("\", line ")?;
            let (line, function) = rest.split_once(", in ")?;
            Some(format!(" (in `{function}`, {file}:{line})"))
        });
    format!("{error}{}", place.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interpreter_error_is_its_last_line_and_the_users_frame() {
        let text = "The following operation failed in the TorchScript interpreter.\nTraceback of TorchScript, serialized code (most recent call last):\n  File \"code/__torch__.py\", line 10, in forward\n    return torch.relu((l).forward(x, ))\n                       ~~~~~~~~~~ <--- HERE\n\nTraceback of TorchScript, original code (most recent call last):\n  File \"/tmp/e.py\", line 8, in forward\n    def forward(self, x):\n        return torch.relu(self.l(x))\n                          ~~~~~~ <--- HERE\n  File \"/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py\", line 134, in forward\n        return F.linear(input, self.weight, self.bias)\nRuntimeError: mat1 and mat2 shapes cannot be multiplied (2x64 and 32x10)\n";
        assert_eq!(
            interpreter_message(text),
            "mat1 and mat2 shapes cannot be multiplied (2x64 and 32x10) (in `forward`, /tmp/e.py:8)"
        );
        assert_eq!(interpreter_message("plain error"), "plain error");
        // Where every frame is PyTorch's (an `nn.Sequential` of its layers), none is named.
        let torch_only = text.replace(
            "/tmp/e.py",
            "/venv/lib/python3.11/site-packages/torch/nn/modules/container.py",
        );
        assert_eq!(
            interpreter_message(&torch_only),
            "mat1 and mat2 shapes cannot be multiplied (2x64 and 32x10)"
        );
    }
}

/// A scripted module that compares the model's output with the target: a loss (over a
/// batch) or a metric (over a split).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    Loss,
    Metric,
}

impl Compare {
    fn module(self) -> Module {
        match self {
            Compare::Loss => Module::Loss,
            Compare::Metric => Module::Metric,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Compare::Loss => "loss",
            Compare::Metric => "metric",
        }
    }
}

/// Loads a scripted loss or metric onto `device` and checks that its `forward` takes
/// what it is given: the output and the target.
pub fn load_compare(
    spec: &TorchScriptSpec,
    what: Compare,
    device: Device,
) -> Result<ScriptModule, Diagnostic> {
    if let Some(refused) = refusal_of(spec, what.module()) {
        return Err(refused);
    }
    let (load_code, arguments_code) = match what {
        Compare::Loss => (
            "pipeline::loss::torchscript_load",
            "pipeline::loss::torchscript_arguments",
        ),
        Compare::Metric => (
            "pipeline::metric::torchscript_load",
            "pipeline::metric::torchscript_arguments",
        ),
    };
    let (shown, noun) = (spec.path.value.display(), what.as_str());
    let failed = |e: TchError| {
        Diagnostic::error(
            load_code,
            format!("cannot load the TorchScript {noun} {shown}: {}", crate::error::short_message(&e)),
        )
        .label_opt(spec.path.span, "this module")
        .help("save it again with `torch.jit.save` from the PyTorch version pipeline runs (the one `scripts/setup.sh` installs); a newer one may write what this libtorch cannot read")
    };
    let module = ScriptModule::load(&spec.file, device, Kind::Float).map_err(failed)?;
    let arguments = module.arguments().map_err(failed)?;
    let required = arguments.iter().filter(|a| !a.has_default).count();
    if arguments.len() < 2 || required > 2 {
        let names: Vec<&str> = arguments.iter().map(|a| a.name.as_str()).collect();
        return Err(Diagnostic::error(
            arguments_code,
            format!(
                "the TorchScript {noun} {shown} has `forward(self, {})`, but a {noun} is given two tensors: the model's output and the target",
                names.join(", ")
            ),
        )
        .label_opt(spec.path.span, "this module")
        .help("write `def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor` (further arguments need defaults), and script it again"));
    }
    Ok(module)
}
