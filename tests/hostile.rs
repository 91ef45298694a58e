//! Hostile launches and handles on the simulator: shapes and arguments that no kernel should get, and what
//! the runtime does with them — refuse them by name before anything runs, or run them in bounded slices
//! that a fault or the launch's own timeout stops. Nothing here may abort the process, hang, or answer
//! "done" for work that was not done. Each test has its own runtime (and simulator), so latches stay
//! local.

mod common;

use common::*;
use omega::session::{RawLaunch, Runtime};
use omega::Error;

fn launch(rt: &Runtime, l: &RawLaunch) -> Result<omega::session::LaunchCompletion, Error> {
    // SAFETY: `l.args` points to `l.n_args` live words for the duration of the call.
    unsafe { rt.launch_raw(l) }
}

// ----- item 13: num_elements reaches the descriptor -------------------------------------------------------

#[test]
fn num_elements_reaches_the_platforms_descriptor_from_a_launch_and_a_list() {
    let (rt, sim) = open_runtime();
    let code = load(&rt, "empty");
    let words = [0u32];
    launch(&rt, &RawLaunch { num_elements: 0xdead_beef, ..raw_launch(&code, &words, 32, 1) }).unwrap();
    assert_eq!(sim.launches().pop().unwrap().num_elements, 0xdead_beef);
    let mut list = omega::cmdlist::CmdList::create_locked(&rt, None).unwrap();
    for n in [1u32, 77, u32::MAX] {
        // SAFETY: `words` lives for the call; the list copies the words.
        unsafe { list.add_raw(&RawLaunch { num_elements: n, ..raw_launch(&code, &words, 32, 1) }) }.unwrap();
    }
    list.submit().unwrap();
    let got: Vec<u32> = sim.launches().iter().rev().take(3).rev().map(|r| r.num_elements).collect();
    assert_eq!(got, [1, 77, u32::MAX]);
    list.free_locked().unwrap();
}
