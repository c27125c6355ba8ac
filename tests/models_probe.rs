mod common;
use netcl::Tensor;
use netcl::autograd::{Var, no_grad, ops as ag};
use netcl::device::timing::{host_reads, record_launches, take_launches};
use netcl::nn::{Module, build_sequential, models};
use netcl::optim::Optimizer;
use std::collections::BTreeMap;
use std::time::Instant;

#[test]
fn probe_profile() {
    let dev = common::opencl_device().unwrap();
    for (name, cfg, n, hw) in [
        (
            "resnet18",
            models::resnet18(3, 10, 64, true).unwrap(),
            2,
            32,
        ),
        (
            "resnet18",
            models::resnet18(3, 10, 64, true).unwrap(),
            8,
            16,
        ),
        (
            "mobilenet_v2",
            models::mobilenet_v2(3, 10, 1.0).unwrap(),
            4,
            64,
        ),
    ] {
        let mut model = build_sequential(&dev, &cfg, 1).unwrap();
        let x = Var::constant(Tensor::randn(&dev, &[n, 3, hw, hw], 0.0, 1.0, 5).unwrap());
        let v: Vec<i32> = (0..n as i32).map(|i| i % 10).collect();
        let y = Tensor::from_slice(&dev, &v, &[n]).unwrap();
        let mut opt = Optimizer::sgd(model.parameters(), 0.01, 0.9, 0.0).unwrap();
        for train in [false, true] {
            model.set_training(train);
            let mut step = |model: &mut netcl::nn::Sequential, opt: &mut Optimizer| {
                if train {
                    opt.zero_grad();
                    let loss = ag::cross_entropy(&model.forward(&x).unwrap(), &y, -100).unwrap();
                    loss.backward().unwrap();
                    opt.step().unwrap();
                } else {
                    no_grad(|| model.forward(&x)).unwrap();
                }
            };
            for _ in 0..3 {
                step(&mut model, &mut opt);
                dev.synchronize().unwrap();
            }
            let t = Instant::now();
            step(&mut model, &mut opt);
            let host = t.elapsed().as_secs_f64() * 1e3;
            dev.synchronize().unwrap();
            let wall = t.elapsed().as_secs_f64() * 1e3;
            let r0 = host_reads();
            record_launches(true);
            step(&mut model, &mut opt);
            dev.synchronize().unwrap();
            let l = take_launches();
            record_launches(false);
            let reads = host_reads() - r0;
            let mut per: BTreeMap<String, (usize, f64)> = BTreeMap::new();
            for x in &l {
                let e = per.entry(x.kernel.clone()).or_default();
                e.0 += 1;
                e.1 += x.ms;
            }
            let total: f64 = l.iter().map(|x| x.ms).sum();
            eprintln!(
                "== {name} n{n} hw{hw} train={train}: wall {wall:.1} ms host {host:.1} ms, {} launches, kernel sum {total:.1} ms, host reads {reads}",
                l.len()
            );
            let mut v: Vec<_> = per.into_iter().collect();
            v.sort_by(|a, b| b.1.1.total_cmp(&a.1.1));
            for (k, (c, ms)) in v.iter().take(14) {
                eprintln!("   {k:40} {c:4} {ms:8.2} ms");
            }
        }
    }
}
